"""Record-level indexes that tag incoming records with the file group holding their key (bloom, simple,
bucket), and secondary indexes over column values (`secondary/`)."""
