"""Process trees read from /proc (Linux), for the scripts that watch the
processes they start: bench/offload_bench.py's memory watchdog sums the
resident size of a command's whole tree, scripts/fault_campaign.py finds
mpirun's rank processes and waits for them to be gone."""
import os


def stat_fields(pid):
    """The fields of /proc/PID/stat that follow the command name (the state
    first, then the parent's pid, ...; proc(5) numbers them from 3), or
    None when the process is gone. The name may hold spaces and
    parentheses, so the fields start after its last ')'."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def processes():
    """Every process's stat fields, by pid."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = stat_fields(entry)
            if fields:
                table[int(entry)] = fields
    return table


def children(pid, table=None):
    """The pids of `pid`'s direct children."""
    table = processes() if table is None else table
    return [child for child, fields in table.items() if int(fields[1]) == pid]


def descendants(root, table=None):
    """`root` and every process below it, as far as they are still there."""
    table = processes() if table is None else table
    below = {}
    for pid, fields in table.items():
        below.setdefault(int(fields[1]), []).append(pid)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in table:
            found.append(pid)
        todo.extend(below.get(pid, []))
    return found


def tree_rss(root):
    """Resident bytes of process `root` and all its descendants."""
    table = processes()
    page = os.sysconf("SC_PAGE_SIZE")
    return sum(int(table[pid][21]) * page for pid in descendants(root, table))


def alive(pid):
    """Whether `pid` runs: it exists and is not a zombie."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] != "Z"
