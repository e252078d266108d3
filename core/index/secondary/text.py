"""The `text` index: a full-text inverted index of string columns on tantivy (a Lucene-style engine).

Each base file gets one tantivy index holding one text field per indexed column and the
row id of every document as a fast field. The words of a value are runs of letters and
digits, lower-cased (`predicates.text_analyzer`, no length limit), with positions, so
the index answers:

- `match` (every word present) and `=` (the value's words present: a superset of the
  equal values) with AND-ed term queries;
- `phrase` with a phrase query;
- `like` with a literal prefix (`'Buying%'`): the prefix's complete words as terms and
  its last word as a prefix (a regex over the term dictionary, never truncated).

All of these may return more rows than the exact predicate (they ignore case, and a
prefix may sit anywhere in the value); the reader applies the exact predicate to the
rows read, so results are exact.

A tantivy index is a folder of files. So that one index is one file on any storage
(local, S3, ...), the folder is packed into one file:

    b"LWTX1\\n" + the folder's files, one after the other + footer (JSON: where each file
    is, num_rows, row groups, columns) + footer length (uint64 LE) + b"LWTX"

Readers unpack it once into a local cache folder (index files never change) and open
it there.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import tempfile
import threading
import uuid
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from pyroaring import BitMap

from lakeward.core.exceptions import CorruptTableError
from lakeward.core.index.secondary.predicates import ColumnPredicate, like_prefix, text_analyzer, words

MAGIC = b"LWTX1\n"
TRAILER_MAGIC = b"LWTX"
FORMAT_VERSION = 1
ROW_FIELD = "__row"
TOKENIZER = "lakeward_words"
_WRITER_HEAP = 128 * 1024 * 1024
_CACHE_ROOT = os.path.join(tempfile.gettempdir(), "lakeward-text-index")


def _field_names(columns: Sequence[str]) -> dict[str, str]:
    return {c: f"c{i}" for i, c in enumerate(columns)}


def _schema(fields: Sequence[str]) -> Any:
    # lazy: tantivy loads only for text indexes
    import tantivy

    builder = tantivy.SchemaBuilder()
    builder.add_unsigned_field(ROW_FIELD, stored=False, indexed=False, fast=True)
    for name in fields:
        builder.add_text_field(name, stored=False, tokenizer_name=TOKENIZER, index_option="position")
    return builder.build()


def build_text_index(
    columns: pa.Table, row_group_rows: Sequence[int], definition_id: str, index_name: str, base_file: str
) -> bytes:
    """The packed text index of one base file: `columns` holds the indexed string columns, all rows, in file order."""
    # lazy: tantivy loads only for text indexes
    import tantivy

    names = _field_names(columns.column_names)
    values = {c: columns.column(c).to_pylist() for c in columns.column_names}
    # tantivy's own threads may still touch the folder as it is removed: leftovers are only temp files.
    with tempfile.TemporaryDirectory(prefix="lakeward-text-build-", ignore_cleanup_errors=True) as folder:
        index = tantivy.Index(_schema(list(names.values())), path=folder)
        index.register_tokenizer(TOKENIZER, text_analyzer())
        writer = index.writer(heap_size=_WRITER_HEAP, num_threads=1)
        long_word_rows: dict[str, list[int]] = {}
        for row in range(columns.num_rows):
            doc = tantivy.Document()
            doc.add_unsigned(ROW_FIELD, row)
            for column, field in names.items():
                value = values[column][row]
                if value is not None:
                    doc.add_text(field, value)
                    if len(value) > MAX_WORD_BYTES // 4 and _has_unindexed_word(value):
                        long_word_rows.setdefault(column, []).append(row)
            writer.add_document(doc)
        writer.commit()
        writer.wait_merging_threads()
        body = bytearray(MAGIC)
        files: dict[str, list[int]] = {}
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if not os.path.isfile(path) or name.endswith(".lock"):
                continue
            with open(path, "rb") as f:
                data = f.read()
            files[name] = [len(body), len(data)]
            body += data
        del writer, index  # released before the folder goes
    footer = {
        "version": FORMAT_VERSION,
        "kind": "text",
        "index_name": index_name,
        "definition_id": definition_id,
        "base_file": base_file,
        "num_rows": columns.num_rows,
        "row_groups": list(row_group_rows),
        "columns": names,
        "files": files,
        "long_word_rows": long_word_rows,
    }
    text = json.dumps(footer).encode()
    body += text
    body += struct.pack("<Q", len(text)) + TRAILER_MAGIC
    return bytes(body)


_open_lock = threading.Lock()


class TextIndexFile:
    """An open text index file (unpacked in the local cache): answers predicates with row ids."""

    def __init__(self, source: Any, size: int, path: str = "", cache_key: str = ""):
        # lazy: tantivy loads only for text indexes
        import tantivy

        self.path = path
        tail_size = min(size, 64 * 1024)
        tail = bytes(source.read_at(tail_size, size - tail_size))
        if len(tail) < 12 or tail[-4:] != TRAILER_MAGIC:
            raise CorruptTableError(f"{path} is not a lakeward text index file")
        (footer_len,) = struct.unpack("<Q", tail[-12:-4])
        if footer_len + 12 > len(tail):
            tail = bytes(source.read_at(footer_len + 12, size - footer_len - 12))
        self.footer = json.loads(tail[-12 - footer_len : -12])
        self.bytes_read = len(tail)
        self.num_rows = int(self.footer["num_rows"])
        self.row_groups: list[int] = list(self.footer["row_groups"])
        self.definition_id = str(self.footer.get("definition_id") or "")
        self._fields: dict[str, str] = dict(self.footer["columns"])
        #: Per column, rows holding a word tantivy left out (longer than `MAX_WORD_BYTES`): every
        #: lookup of the column includes them, for the scan to decide.
        self._long_word_rows = {c: BitMap(rows) for c, rows in (self.footer.get("long_word_rows") or {}).items()}
        digest = hashlib.sha1(f"{cache_key}|{path}|{size}".encode()).hexdigest()
        folder = os.path.join(_CACHE_ROOT, digest)
        if not os.path.isdir(folder):
            self.bytes_read += self._unpack(source, folder)
        with _open_lock:
            self._index = tantivy.Index.open(folder)
            self._index.register_tokenizer(TOKENIZER, text_analyzer())
        self._searcher = self._index.searcher()
        self._schema = self._index.schema

    def _unpack(self, source: Any, folder: str) -> int:
        os.makedirs(_CACHE_ROOT, exist_ok=True)
        staging = f"{folder}.{uuid.uuid4().hex}.tmp"
        os.makedirs(staging)
        total = 0
        for name, (offset, length) in self.footer["files"].items():
            with open(os.path.join(staging, name), "wb") as f:
                f.write(bytes(source.read_at(length, offset)))
            total += length
        try:
            os.rename(staging, folder)
        except OSError:  # another reader unpacked it first
            shutil.rmtree(staging, ignore_errors=True)
        return total

    @property
    def columns(self) -> list[str]:
        return list(self._fields)

    def all_rows(self) -> BitMap:
        return BitMap(range(self.num_rows))

    def _query(self, p: ColumnPredicate) -> Any | None:
        # lazy: tantivy loads only for text indexes
        import tantivy

        field = self._fields.get(p.column)
        if field is None or not isinstance(p.value, str):
            return None
        schema = self._schema

        def all_of(terms: Sequence[str]) -> Any:
            if len(terms) == 1:
                return tantivy.Query.term_query(schema, field, terms[0])
            return tantivy.Query.boolean_query(
                [(tantivy.Occur.Must, tantivy.Query.term_query(schema, field, t)) for t in terms]
            )

        if p.op in ("match", "="):
            terms = words(p.value)
            if not terms:
                return "empty" if p.op == "match" else None
            return all_of(terms)
        if p.op == "phrase":
            terms = words(p.value)
            if not terms:
                return "empty"
            return all_of(terms) if len(terms) == 1 else tantivy.Query.phrase_query(schema, field, terms)
        if p.op == "like":
            prefix = like_prefix(p.value)
            if prefix is None:
                return None
            terms = words(prefix)
            if not terms or not prefix[-1].isascii():
                return None  # whether a non-ASCII last character ends a word is tantivy's call: the scan decides
            last_open = prefix[-1].isalnum() and words(prefix[-1])
            if last_open and (not terms[-1].isascii() or len(terms[-1]) > _MAX_REGEX_WORD):
                return None  # quoted for tantivy's regex only in ASCII, and only so long: the scan decides
            parts = [tantivy.Query.term_query(schema, field, t) for t in (terms[:-1] if last_open else terms)]
            if last_open:
                parts.append(tantivy.Query.regex_query(schema, field, _regex_literal(terms[-1]) + ".*"))
            if len(parts) == 1:
                return parts[0]
            return tantivy.Query.boolean_query([(tantivy.Occur.Must, q) for q in parts])
        return None

    def lookup(self, p: ColumnPredicate, max_rows: int | None = None) -> BitMap | None:
        """Row ids that may satisfy `p` (a superset of the exact answer); None when the index cannot answer."""
        query = self._query(p)
        if query is None:
            return None
        if isinstance(query, str):
            return BitMap()
        unindexed = self._long_word_rows.get(p.column, BitMap())
        if not self._searcher.num_docs:
            return BitMap(unindexed)
        result = self._searcher.search(query, limit=max(1, self._searcher.num_docs), count=False)
        addresses = [address for _, address in result.hits]
        if not addresses:
            return BitMap(unindexed)
        values = self._searcher.fast_field_values(ROW_FIELD, addresses)
        return BitMap(int(r) for r in values if isinstance(r, int)) | unindexed

    def estimate(self, p: ColumnPredicate) -> int | None:
        return None


#: The longest word tantivy indexes, in UTF-8 bytes (its `MAX_TOKEN_LEN`): longer ones are left out.
MAX_WORD_BYTES = 65530


def _has_unindexed_word(value: str) -> bool:
    """Whether `value` holds a word tantivy leaves out of the index (longer than `MAX_WORD_BYTES`)."""
    return any(len(w) > MAX_WORD_BYTES // 4 and len(w.encode("utf-8")) > MAX_WORD_BYTES for w in words(value))


#: The longest last word a `like` prefix query is built for (tantivy compiles regexes up to a size).
_MAX_REGEX_WORD = 100


def _regex_literal(word: str) -> str:
    return "".join(c if c.isalnum() else "\\" + c for c in word)
