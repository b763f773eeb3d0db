"""The command groups registered on the app, one module per job."""
