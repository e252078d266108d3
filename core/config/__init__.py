"""Typed configuration: table properties (`hoodie.properties`), write and CDC options, each key by its `hoodie.*`
name with its default; what the layers above read instead of raw option dicts."""
