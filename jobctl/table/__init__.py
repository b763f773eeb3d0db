"""The user's jobs table in the lease design's terms (layer 1): names, column types, libraries.

``mapping`` holds the table's own names for the design's columns and statuses; ``column_types``
which types of those columns jobctl serves and the SQL fragments that read and write each;
``libraries`` recognises queue libraries' tables by their shape. Nothing here touches the
database.
"""
