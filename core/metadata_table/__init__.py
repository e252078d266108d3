"""The metadata table (`.hoodie/metadata/`) of Hudi 1.x tables: what lakeward writes into it.

Reading its `files` partition is `file_group.metadata_listing`; this package builds it:
`files_partition` turns a storage listing into the `files` partition's records, and
`bootstrap.initialize_metadata_table` creates the metadata table of an existing table
version 8/9 table with that partition, as Hudi 1.x does when it first enables it.
"""

from lakeward.core.lazy import on_first_use

__getattr__ = on_first_use(__name__)  # submodules load when first used (start-up time, issue 23)
