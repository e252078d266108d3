"""Record-level indexes that tag incoming records with the file group holding their key (bloom, simple,
bucket), and secondary indexes over column values (`secondary/`)."""

from lakeward.core.lazy import on_first_use

__getattr__ = on_first_use(__name__)  # submodules load when first used (start-up time, issue 23)
