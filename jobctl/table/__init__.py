"""The user's jobs table in the lease design's terms: names, column types, libraries."""
