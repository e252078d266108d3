"""The Spark surface of lakeward: the `lakeward` data source, SQL functions, CDC reads and streaming (uses Table)."""
