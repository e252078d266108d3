"""The `HoodieMetadataRecord` Avro schema: the value of every metadata-table record.

Taken verbatim from the `schema` file-info entry of the Hudi 1.1.1 fixtures' metadata-table
HFiles (identical in all of them; Hudi's `HoodieMetadata.avsc` with the five `_hoodie_*`
meta fields in front). Rendered with `json.dumps(..., separators=(",", ":"))` it is byte for
byte the string Hudi writes: into each base HFile's file info with the meta fields
(`HFILE_SCHEMA_JSON`), and into the `schema` extra metadata of a metadata-table delta
commit without them (`COMMIT_SCHEMA_JSON`).
"""

from __future__ import annotations

import json
from enum import IntEnum
from typing import Any


class MetadataRecordType(IntEnum):
    """The record's `type` field: which metadata-table partition the record belongs to."""

    ALL_PARTITIONS = 1
    FILE_LIST = 2
    COLUMN_STATS = 3
    BLOOM_FILTER = 4
    RECORD_INDEX = 5
    PARTITION_STATS = 6
    SECONDARY_INDEX = 7


#: Hudi's Avro string type (Java `String`, not `Utf8`).
_STRING = {"type": "string", "avro.java.string": "String"}


#: The column-stats value wrappers of a single value, in union order (names once defined).
_SCALAR_WRAPPERS = [
    "BooleanWrapper",
    "IntWrapper",
    "LongWrapper",
    "FloatWrapper",
    "DoubleWrapper",
    "BytesWrapper",
    "StringWrapper",
    "DateWrapper",
    "DecimalWrapper",
    "TimeMicrosWrapper",
    "TimestampMicrosWrapper",
    "LocalDateWrapper",
]


def _optional(name: str, value_type: Any, doc: str) -> dict[str, Any]:
    """A nullable field, null by default."""
    return {"name": name, "type": ["null", value_type], "doc": doc, "default": None}


def _wrapper(name: str, wrapped: str, value_type: Any) -> dict[str, Any]:
    """One of the column-stats value wrappers: a record with a single field `value`."""
    return {
        "type": "record",
        "name": name,
        "doc": f"A record wrapping {wrapped} type to be able to be used it w/in Avro's Union",
        "fields": [{"name": "value", "type": value_type}],
    }


METADATA_RECORD_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieMetadataRecord",
    "namespace": "org.apache.hudi.avro.model",
    "doc": "A record saved within the Metadata Table",
    "fields": [
        _optional("_hoodie_commit_time", "string", ""),
        _optional("_hoodie_commit_seqno", "string", ""),
        _optional("_hoodie_record_key", "string", ""),
        _optional("_hoodie_partition_path", "string", ""),
        _optional("_hoodie_file_name", "string", ""),
        {"name": "key", "type": _STRING},
        {"name": "type", "type": "int", "doc": "Type of the metadata record"},
        {
            "name": "filesystemMetadata",
            "type": [
                "null",
                {
                    "type": "map",
                    "values": {
                        "type": "record",
                        "name": "HoodieMetadataFileInfo",
                        "fields": [
                            {"name": "size", "type": "long", "doc": "Size of the file"},
                            {"name": "isDeleted", "type": "boolean", "doc": "True if this file has been deleted"},
                        ],
                    },
                    "avro.java.string": "String",
                },
            ],
            "doc": "Contains information about partitions and files within the dataset",
        },
        _optional(
            "BloomFilterMetadata",
            {
                "type": "record",
                "name": "HoodieMetadataBloomFilter",
                "doc": "Data file bloom filter details",
                "fields": [
                    {"name": "type", "type": _STRING, "doc": "Bloom filter type code"},
                    {
                        "name": "timestamp",
                        "type": _STRING,
                        "doc": "Instant timestamp when this metadata was created/updated",
                    },
                    {"name": "bloomFilter", "type": "bytes", "doc": "Bloom filter binary byte array"},
                    {"name": "isDeleted", "type": "boolean", "doc": "Bloom filter entry valid/deleted flag"},
                ],
            },
            "Metadata Index of bloom filters for all data files in the user table",
        ),
        _optional(
            "ColumnStatsMetadata",
            {
                "type": "record",
                "name": "HoodieMetadataColumnStats",
                "doc": "Data file column statistics",
                "fields": [
                    _optional("fileName", _STRING, "File name for which this column statistics applies"),
                    _optional("columnName", _STRING, "Column name for which this column statistics applies"),
                    {
                        "name": "minValue",
                        "type": [
                            "null",
                            _wrapper("BooleanWrapper", "boolean", "boolean"),
                            _wrapper("IntWrapper", "int", "int"),
                            _wrapper("LongWrapper", "long", "long"),
                            _wrapper("FloatWrapper", "float", "float"),
                            _wrapper("DoubleWrapper", "double", "double"),
                            _wrapper("BytesWrapper", "bytes", "bytes"),
                            _wrapper("StringWrapper", "string", _STRING),
                            _wrapper("DateWrapper", "Date logical", "int"),
                            _wrapper(
                                "DecimalWrapper",
                                "Decimal logical",
                                {"type": "bytes", "logicalType": "decimal", "precision": 30, "scale": 15},
                            ),
                            _wrapper(
                                "TimeMicrosWrapper",
                                "Time-micros logical",
                                {"type": "long", "logicalType": "time-micros"},
                            ),
                            _wrapper("TimestampMicrosWrapper", "Timestamp-micros logical", "long"),
                            _wrapper("LocalDateWrapper", "Local Date", "int"),
                            {
                                "type": "record",
                                "name": "ArrayWrapper",
                                "doc": "A record containing a list of wrapped values.",
                                "fields": [
                                    _optional(
                                        "wrappedValues",
                                        {
                                            "type": "array",
                                            "items": ["null", *_SCALAR_WRAPPERS],
                                        },
                                        "An array where each element is one of the supported wrapper types.",
                                    )
                                ],
                            },
                        ],
                        "doc": (
                            "Minimum value in the range. Based on user data table schema, we can convert this"
                            " to appropriate type"
                        ),
                        "default": None,
                    },
                    {
                        "name": "maxValue",
                        "type": ["null", *_SCALAR_WRAPPERS, "ArrayWrapper"],
                        "doc": (
                            "Maximum value in the range. Based on user data table schema, we can convert it "
                            "to appropriate type"
                        ),
                        "default": None,
                    },
                    _optional("valueCount", "long", "Total count of values"),
                    _optional("nullCount", "long", "Total count of null values"),
                    _optional("totalSize", "long", "Total storage size on disk"),
                    _optional("totalUncompressedSize", "long", "Total uncompressed storage size on disk"),
                    {"name": "isDeleted", "type": "boolean", "doc": "Column range entry valid/deleted flag"},
                    {
                        "name": "isTightBound",
                        "type": "boolean",
                        "doc": "Whether the min/max range of a column is tight bound or not",
                        "default": False,
                    },
                    _optional(
                        "valueType",
                        {
                            "type": "record",
                            "name": "HoodieValueTypeInfo",
                            "fields": [
                                {
                                    "name": "typeOrdinal",
                                    "type": "int",
                                    "doc": "Enum type ordinal representing the value type",
                                },
                                _optional(
                                    "additionalInfo", _STRING, "Optional additional information about the value type"
                                ),
                            ],
                        },
                        ("Value type information containing enum ordinal and optional additional information"),
                    ),
                ],
            },
            "Metadata Index of column statistics for all data files in the user table",
        ),
        _optional(
            "recordIndexMetadata",
            {
                "type": "record",
                "name": "HoodieRecordIndexInfo",
                "fields": [
                    _optional("partitionName", _STRING, "Refers to the partition name the record belongs to"),
                    _optional(
                        "fileIdHighBits",
                        "long",
                        (
                            "Refers to high 64 bits if the fileId is based on UUID format. \nA UUID based "
                            "fileId is stored as 3 pieces in RLI (fileIdHighBits, fileIdLowBits and "
                            "fileIndex). \nFileID format is {UUID}-{fileIndex}."
                        ),
                    ),
                    _optional(
                        "fileIdLowBits",
                        "long",
                        (
                            "Refers to low 64 bits if the fileId is based on UUID format. \nA UUID based "
                            "fileId is stored as 3 pieces in RLI (fileIdHighBits, fileIdLowBits and "
                            "fileIndex). \nFileID format is {UUID}-{fileIndex}."
                        ),
                    ),
                    _optional(
                        "fileIndex",
                        "int",
                        (
                            "Index representing file index which is used to re-construct UUID based fileID. "
                            "Applicable when the fileId is based on UUID format. \nA UUID based fileId is "
                            "stored as 3 pieces in RLI (fileIdHighBits, fileIdLowBits and fileIndex). \nFileID"
                            " format is {UUID}-{fileIndex}."
                        ),
                    ),
                    _optional(
                        "fileId",
                        _STRING,
                        (
                            "Represents fileId of the location where record belongs to. When the encoding is "
                            "1, fileID is stored in raw string format."
                        ),
                    ),
                    _optional(
                        "instantTime",
                        "long",
                        "Epoch time in millisecond representing the commit time at which record was added",
                    ),
                    {
                        "name": "fileIdEncoding",
                        "type": "int",
                        "doc": (
                            "Represents fileId encoding. Possible values are 0 and 1. O represents UUID based"
                            " fileID, and 1 represents raw string format of the fileId. \nWhen the encoding is"
                            " 0, reader can deduce fileID from fileIdLowBits, fileIdHighBits and fileIndex."
                        ),
                        "default": 0,
                    },
                    _optional(
                        "position",
                        "long",
                        (
                            "Represents position of record within a file group for easier access. It will be "
                            "used for index lookup."
                        ),
                    ),
                ],
            },
            ("Metadata Index that contains information about record keys and their location in the dataset"),
        ),
        _optional(
            "SecondaryIndexMetadata",
            {
                "type": "record",
                "name": "HoodieSecondaryIndexInfo",
                "fields": [{"name": "isDeleted", "type": "boolean", "doc": "True if this entry has been deleted"}],
            },
            (
                "Metadata Index that contains information about secondary keys and the "
                "corresponding record keys in the dataset"
            ),
        ),
    ],
}

#: The schema as Hudi stores it in metadata-table HFiles (and log blocks' `SCHEMA` header).
HFILE_SCHEMA_JSON = json.dumps(METADATA_RECORD_SCHEMA, separators=(",", ":"))
#: The schema as a metadata-table delta commit records it (`extraMetadata.schema`): no meta fields.
COMMIT_SCHEMA_JSON = json.dumps(
    {
        **METADATA_RECORD_SCHEMA,
        "fields": [f for f in METADATA_RECORD_SCHEMA["fields"] if not f["name"].startswith("_hoodie_")],
    },
    separators=(",", ":"),
)
