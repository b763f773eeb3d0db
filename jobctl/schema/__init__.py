"""What jobctl installs on a jobs table, checks and removes."""
