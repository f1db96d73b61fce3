"""The ``byo`` runtime's launcher: any agent program, behind the owner handle and the relay."""
