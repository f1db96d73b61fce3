"""Each runtime's configuration types, read by its descriptor (controller) and its program."""
