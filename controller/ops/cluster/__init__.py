"""``society cluster up|down --profile kind``: stand a profile's cluster up in one command and
take it down in one, as a sequence of named, idempotent install steps."""
