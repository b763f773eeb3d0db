"""jobctl's SQL: the named statements of the .sql files beside this package, loaded once."""
