"""Which file version each missing before / after image of a file group's changes is read from.

Logging modes KEY_OP and DATA_BEFORE persist no after-images (KEY_OP no before-images
either): they are looked up in the file group's versions. Commit i's before-images stand
in the version before it and its after-images in the version it wrote; but a row stands
unchanged in every version from the one that wrote it to the one before the key's next
change. So when consecutive commits' versions chain (commit i+1 rewrote exactly the base
file commit i wrote, and no slice has log files), an image can be read from any version
of its span, and the versions read are the fewest that hit every span (the greedy cover
of intervals: sorted by their end, each uncovered interval's end is picked). A file group
whose keys change once in the range is read twice, not once per commit; a key changed by
every commit costs what reading every version did.

The changes must name each key at most once per commit (the `.cdc` contract); when one
does not, every image comes from its own commit's versions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakeward.core.cdc.splits import ChangeSplit, FileGroupState


@dataclass(frozen=True)
class ImageVersions:
    """The versions images are read from: `versions[v]` (None: cleaned) and, per change row,
    the version of its before-image (`before`) and of its after-image (`after`)."""

    versions: list[FileGroupState | None]
    #: The split that introduced each version (what an error about a missing version names).
    introduced_by: list[ChangeSplit]
    before: np.ndarray
    after: np.ndarray


def _plain_base(state: FileGroupState | None) -> str | None:
    """The base file of a state that is that file alone (no log files), else None."""
    if state is None or state.file_slice.log_files or state.file_slice.base_file is None:
        return None
    return state.file_slice.base_file.path


def _chained(previous: ChangeSplit, split: ChangeSplit) -> bool:
    """Whether `split`'s commit rewrote exactly the base file `previous`'s commit wrote."""
    written = _plain_base(previous.after)
    return written is not None and written == _plain_base(split.before) and _plain_base(split.after) is not None


def image_versions(
    splits: Sequence[ChangeSplit],
    sizes: Sequence[int],
    keys: pa.Array,
    needs_before: np.ndarray,
    needs_after: np.ndarray,
) -> ImageVersions:
    """The versions the images of `splits`' changes come from (`keys`: the changes' record keys,
    `sizes[i]` of them split i's, in the splits' commit order; `needs_*`: the rows whose image
    is looked up)."""
    versions: list[FileGroupState | None] = []
    introduced_by: list[ChangeSplit] = []
    n = len(splits)
    v_before, v_after = np.empty(n, np.int64), np.empty(n, np.int64)
    chain = np.empty(n, np.int64)
    chain_first: list[int] = []
    chain_last: list[int] = []
    for i, split in enumerate(splits):
        if i > 0 and _chained(splits[i - 1], split):
            v_before[i] = v_after[i - 1]
        else:
            v_before[i] = len(versions)
            versions.append(split.before)
            introduced_by.append(split)
            chain_first.append(int(v_before[i]))
            chain_last.append(-1)
        chain[i] = len(chain_first) - 1
        v_after[i] = len(versions)
        versions.append(split.after)
        introduced_by.append(split)
        chain_last[-1] = int(v_after[i])
    row_split = np.repeat(np.arange(n, dtype=np.int64), sizes)
    before, after = v_before[row_split], v_after[row_split]
    if len(chain_first) == n or len(row_split) == 0:  # no chain of two commits: each commit's own versions
        return ImageVersions(versions, introduced_by, before, after)
    key_ids = pc.dictionary_encode(keys).indices.to_numpy(zero_copy_only=False).astype(np.int64)
    row_chain = chain[row_split]
    order = np.lexsort((row_split, key_ids, row_chain))
    s_split, s_key, s_chain = row_split[order], key_ids[order], row_chain[order]
    same = (s_key[1:] == s_key[:-1]) & (s_chain[1:] == s_chain[:-1])
    if (same & (s_split[1:] == s_split[:-1])).any():  # a key twice in one commit's changes
        return ImageVersions(versions, introduced_by, before, after)
    has_prev, has_next = np.r_[False, same], np.r_[same, False]
    first, last = np.array(chain_first, np.int64), np.array(chain_last, np.int64)
    prev_split, next_split = np.r_[0, s_split[:-1]], np.r_[s_split[1:], 0]
    # The span of versions each image stands in: a before-image from the version the key's
    # previous change in the chain wrote (else the chain's first) to the one before this
    # change; an after-image from this change's version to the one before the key's next
    # change (else the chain's last).
    spans = np.empty((len(order), 2, 2), np.int64)
    spans[order, 0, 0] = np.where(has_prev, v_after[prev_split], first[s_chain])
    spans[order, 0, 1] = v_before[s_split]
    spans[order, 1, 0] = v_after[s_split]
    spans[order, 1, 1] = np.where(has_next, v_before[next_split], last[s_chain])
    wanted = np.concatenate([spans[needs_before, 0], spans[needs_after, 1]])
    picked = _cover(wanted)
    before[needs_before] = picked[np.searchsorted(picked, spans[needs_before, 0, 0])]
    after[needs_after] = picked[np.searchsorted(picked, spans[needs_after, 1, 0])]
    return ImageVersions(versions, introduced_by, before, after)


def _cover(spans: np.ndarray) -> np.ndarray:
    """The fewest versions hitting every span (rows `[first, last]`), sorted: the greedy cover
    (each span not hit yet, in order of its end, picks its end). Every span's smallest picked
    version at or after its first is then within it."""
    picked: list[int] = []
    if len(spans) == 0:
        return np.array(picked, np.int64)
    width = int(spans.max()) + 1
    by_end = np.unique(spans[:, 1] * width + spans[:, 0])  # distinct spans, ordered by their end
    for hi, lo in zip((by_end // width).tolist(), (by_end % width).tolist()):
        if not picked or picked[-1] < lo:
            picked.append(hi)
    return np.array(picked, np.int64)
