"""Virtual workers: which rank computes which micro-batch, and which records a worker reads.

Worker ``v`` of ``V`` reads, at its local position ``p`` (= iteration * iter_size * batch +
pass * batch + item), the record ``(p * V + v) mod N``: the V workers of one iteration read V
consecutive disjoint slices of the global sequence, so one epoch uses every record exactly
once, whoever computes what.
"""

__all__ = ['assign', 'reassign', 'record_of']


def assign(num_workers, members):
    """{original rank: [workers]} at the start: worker v goes to the (v mod n)-th rank."""
    members = sorted(members)
    hosting = {r: [] for r in members}
    for v in range(num_workers):
        hosting[members[v % len(members)]].append(v)
    return hosting


def reassign(hosting, members):
    """Survivors keep their workers; the dead ranks' workers go, in order, to the least loaded
    survivor (lowest rank first). Every survivor computes the same result."""
    alive = sorted(members)
    new = {r: list(hosting.get(r, [])) for r in alive}
    orphans = sorted(v for r, workers in hosting.items() if r not in new for v in workers)
    for v in orphans:
        target = min(alive, key=lambda r: (len(new[r]), r))
        new[target].append(v)
    return new


def record_of(position, worker, num_workers, num_records):
    return (position * num_workers + worker) % num_records
