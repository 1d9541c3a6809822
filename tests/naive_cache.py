"""Slow, obviously-correct pure-Python cache references, written straight from DESIGN section 4.

``NaiveCache``: one sectored set-associative LRU cache (an OrderedDict per set, LRU first).
``NaiveHierarchy``: per-SM NaiveCache L1s and a sliced NaiveCache L2, with the same ``feed`` /
``metrics`` contract as ``simcore.Hierarchy``.
"""
from collections import OrderedDict

from simcore import metrics as M
from simcore.config import CacheStats

__all__ = ["NaiveCache", "NaiveHierarchy", "naive_simulate_trace"]


class NaiveCache:
    """One cache. ``access`` returns "hit", "sector_miss" or "tag_miss"."""

    def __init__(self, config):
        self.config = config
        self.sets = [OrderedDict() for _ in range(config.sets)]   # line -> [valid set, {sector: tag}]
        self.dirty_evictions = 0
        self.evicted_dirty_tags = []       # tag of every dirty sector written below, in order

    def set_index(self, line):
        sets = self.config.sets
        if self.config.index == "linear":
            return line % sets
        b = sets.bit_length() - 1
        return (line ^ (line >> b) ^ (line >> (2 * b))) & (sets - 1)

    def access(self, addr, write=False, tag=None, set_line=None):
        """Access the sector holding byte ``addr``; the line address is the tag.

        ``set_line`` overrides the address the set index function is applied to (an L2 slice
        indexes its sets by ``line // slices`` but still tells lines apart by their full address)."""
        cfg = self.config
        line = addr // cfg.line_bytes
        if set_line is None:
            set_line = line
        sector = (addr % cfg.line_bytes) // cfg.sector_bytes
        lines = self.sets[self.set_index(set_line)]
        if line in lines:
            lines.move_to_end(line)                       # MRU
            valid, dirty = lines[line]
            outcome = "hit" if sector in valid else "sector_miss"
            valid.add(sector)
        else:
            if len(lines) == cfg.ways:
                _, (_, old_dirty) = lines.popitem(last=False)   # evict LRU
                self.dirty_evictions += len(old_dirty)
                self.evicted_dirty_tags.extend(old_dirty[s] for s in sorted(old_dirty))
            lines[line] = ({sector}, {})
            dirty = lines[line][1]
            outcome = "tag_miss"
        if write:
            dirty[sector] = tag                            # the last store's tag
        return outcome

    def dirty_tags(self):
        """Tags of the dirty sectors still resident."""
        return [tag for lines in self.sets for _, dirty in lines.values() for tag in dirty.values()]


def naive_simulate_trace(addresses, config, writes=None) -> CacheStats:
    cache = NaiveCache(config)
    counts = dict(hits=0, tag_misses=0, read_hits=0, write_accesses=0, write_hits=0)
    for i, addr in enumerate(addresses):
        write = bool(writes[i]) if writes is not None else False
        outcome = cache.access(int(addr), write)
        counts["write_accesses"] += write
        if outcome == "hit":
            counts["hits"] += 1
            counts["write_hits" if write else "read_hits"] += 1
        elif outcome == "tag_miss":
            counts["tag_misses"] += 1
    n = len(addresses)
    return CacheStats(accesses=n, hits=counts["hits"], misses=n - counts["hits"],
                      tag_misses=counts["tag_misses"], read_accesses=n - counts["write_accesses"],
                      read_hits=counts["read_hits"], write_accesses=counts["write_accesses"],
                      write_hits=counts["write_hits"], dirty_evictions=cache.dirty_evictions,
                      dirty_at_end=len(cache.dirty_tags()))


class NaiveHierarchy:
    """Per-SM L1s + sliced L2 (DESIGN section 4), same contract as ``simcore.Hierarchy``."""

    def __init__(self, l1, sms, l2_slice, l2_slices, slice_hash="xor"):
        self.l1s = [NaiveCache(l1) for _ in range(sms)]
        self.l2 = [NaiveCache(l2_slice) for _ in range(l2_slices)]
        self.l2_slices = l2_slices
        self.slice_hash = slice_hash
        self.line_bytes = l2_slice.line_bytes
        self.counts = {key: 0 for key in M.all_keys()}

    def _count(self, metric, op, n=1):
        self.counts[metric] += n
        self.counts[M.operand_key(metric, op)] += n

    def _l2(self, addr, write, op):
        line = addr // self.line_bytes
        h = line ^ (line >> 7) ^ (line >> 14) if self.slice_hash == "xor" else line
        cache = self.l2[h % self.l2_slices]
        before = len(cache.evicted_dirty_tags)
        outcome = cache.access(addr, write, op, set_line=line // self.l2_slices)
        for tag in cache.evicted_dirty_tags[before:]:
            self._count(M.DRAM_WR_SECTORS, tag)
        if write:
            self._count(M.L2_WR_SECTORS, op)
            self._count(M.L2_WR_HITS if outcome == "hit" else M.L2_WR_MISSES, op)
        else:
            self._count(M.L2_RD_SECTORS, op)
            if outcome == "hit":
                self._count(M.L2_RD_HITS, op)
            else:
                self._count(M.L2_RD_MISSES, op)
                self._count(M.DRAM_RD_SECTORS, op)

    def feed(self, req_sm, req_operand, req_kind, req_first, req_count, sectors):
        """Request kinds (DESIGN section 4): 0 a load (looks up the SM's L1; a miss reads the L2), 1 a
        store (L1 untouched; writes the L2), 2 ``cp.async.cg`` (L1 neither looked up nor changed;
        reads the L2), 3 ``cp.async.ca`` (behaves as a load), each counted under its own L1 keys."""
        for r in range(len(req_sm)):
            sm, op, kind = int(req_sm[r]), M.OPERANDS[int(req_operand[r])], int(req_kind[r])
            first, count = int(req_first[r]), int(req_count[r])
            keys = M.KIND_KEYS[kind]               # requests, sectors[, hits, misses]
            self._count(keys[0], op)
            for addr in sectors[first:first + count]:
                addr = int(addr)
                self._count(keys[1], op)
                if kind == M.KIND_ST:
                    self._l2(addr, True, op)
                elif kind == M.KIND_CP_ASYNC_CG:
                    self._l2(addr, False, op)
                elif self.l1s[sm].access(addr) == "hit":
                    self._count(keys[2], op)
                else:
                    self._count(keys[3], op)
                    self._l2(addr, False, op)

    def metrics(self):
        out = dict(self.counts)
        for cache in self.l2:
            for tag in cache.dirty_tags():
                out[M.L2_DIRTY_AT_END] += 1
                out[M.operand_key(M.L2_DIRTY_AT_END, tag)] += 1
        return out
