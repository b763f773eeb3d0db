"""The workflows: each command's job, for one database or many."""
