"""What elastic kolorun tells a worker (its environment), and the worker's three questions
to kolorun's rendezvous server (/work/notes/elastic_contract.md; docs/elastic.md).

One request line per connection, one reply line:
    KOLOE <token> CHECK <g>                   -> OK SAME | OK UPDATED added|removed|both
                                                 | OK GROW <host:n,...>
    KOLOE <token> RESTART <g> <commit>        -> OK
    KOLOE <token> RESUMED <g> <commit> <size> -> OK
    KOLOE <token> SHRUNK <g> <size>           -> OK (go on as incarnation g + 1) | ERR <why>
    KOLOE <token> GREW <g> <size>             -> OK (go on as incarnation g + 1)
    KOLOE <token> NOTJOINED <g> <host:n,...>  -> OK
and "ERR <reason>" for a bad request. SHRUNK, GROW, GREW and NOTJOINED are the in-place
path's (KOLO_ELASTIC_IN_PLACE): the survivors of a lost rank shrank their communicators,
and kolorun says whether the job may go on at that size; kolorun offers free slots (GROW)
instead of asking for a restart, rank 0 starts new processes there while the job trains
and says GREW once they joined, or NOTJOINED when they failed to start.
"""
import collections
import os
import re
import socket

ElasticEnv = collections.namedtuple(
    "ElasticEnv", "job generation rendezvous token directory in_place replacement grow_in_place",
    defaults=(False, False, True))


def _job(value):
    if not re.fullmatch(r"[0-9a-fA-F]{32}", value):
        raise ValueError("32 hex digits")
    return value.lower()


def _generation(value):
    if not re.fullmatch(r"\d+", value):
        raise ValueError("a number >= 0")
    return int(value)


def _address(value):
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("address:port")
    return host.strip("[]"), int(port)


def _token(value):
    if not value or any(c.isspace() for c in value):
        raise ValueError("a word without spaces")
    return value


def _flag(value):
    if value not in ("0", "1"):
        raise ValueError("0 or 1")
    return value == "1"


# name, field, default (None: required), meaning, parser
SETTINGS = [
    ("KOLO_ELASTIC_JOB", "job", None, "the kolorun run (the same for every incarnation)",
     _job),
    ("KOLO_ELASTIC_GENERATION", "generation", None, "this incarnation: 0, 1, 2, ...",
     _generation),
    ("KOLORUN_RENDEZVOUS", "rendezvous", None, "kolorun's rendezvous server", _address),
    ("KOLORUN_TOKEN", "token", None, "the run's token", _token),
    ("KOLO_ELASTIC_DIR", "directory", "/dev/shm",
     "where commits are kept (each host's own; tmpfs)", str),
    ("KOLO_ELASTIC_IN_PLACE", "in_place", "0",
     "1: a lost rank is recovered in place (Open MPI 5 with fault tolerance)",
     _flag),
    ("KOLO_ELASTIC_REPLACEMENT", "replacement", "0",
     "1: this process was started by rank 0 to grow the job in place, and joins it",
     _flag),
    ("KOLO_ELASTIC_GROW_IN_PLACE", "grow_in_place", "1",
     "0: free slots are filled through a restart even where new processes could join",
     _flag),
]


def read(environ=None):
    """The worker's ElasticEnv under elastic kolorun (KOLO_ELASTIC=1), else None. A
    missing or malformed variable is a ValueError naming it and its value."""
    environ = os.environ if environ is None else environ
    if environ.get("KOLO_ELASTIC", "0") in ("", "0"):
        return None
    if environ["KOLO_ELASTIC"] != "1":
        raise ValueError("KOLO_ELASTIC=%r: expected 1 (elastic kolorun) or 0"
                         % environ["KOLO_ELASTIC"])
    values = {}
    for name, field, default, meaning, parse in SETTINGS:
        raw = environ.get(name, default)
        if raw is None:
            raise ValueError("KOLO_ELASTIC=1 but %s (%s) is not set; elastic jobs are "
                             "started by kolorun --min-np/--max-np/--host-discovery-script"
                             % (name, meaning))
        try:
            values[field] = parse(raw)
        except ValueError as e:
            raise ValueError("%s=%r: expected %s" % (name, raw, e)) from None
    return ElasticEnv(**values)


class RendezvousError(RuntimeError):
    """kolorun did not answer, or answered ERR."""


def ask(env, words, timeout=30.0):
    """Sends ``KOLOE <token> <words...>`` and returns the reply's words after "OK"."""
    request = "KOLOE %s %s\n" % (env.token, " ".join(str(w) for w in words))
    where = "%s:%d" % env.rendezvous
    try:
        with socket.create_connection(env.rendezvous, timeout=timeout) as s:
            s.sendall(request.encode())
            reply = b""
            while not reply.endswith(b"\n"):
                chunk = s.recv(256)
                if not chunk:
                    break
                reply += chunk
    except OSError as e:
        raise RendezvousError("kolo: elastic: kolorun's rendezvous %s did not answer %s: %s"
                              % (where, words[0], e)) from None
    answer = reply.decode(errors="replace").strip().split()
    if not answer or answer[0] != "OK":
        raise RendezvousError("kolo: elastic: kolorun's rendezvous %s answered %s with %r"
                              % (where, words[0], reply.decode(errors="replace").strip()))
    return answer[1:]


# Horovod's HostUpdateResult values, and kolo's offer to grow in place.
NO_UPDATE, REMOVED, ADDED, MIXED, GROW = 0, 1, 2, 3, 4
_UPDATES = {"removed": REMOVED, "added": ADDED, "both": MIXED}


def parse_slots(spec):
    """``host:n,+host2:m`` -> ([host, host, ..., host2, ...], [host2]): one entry per slot,
    and the hosts marked ``+``, which mpirun's allocation does not hold yet."""
    hosts, added = [], []
    for part in spec.split(","):
        host, sep, count = part.rpartition(":")
        if host.startswith("+"):
            host = host[1:]
            added.append(host)
        if not sep or not host or not count.isdigit() or int(count) < 1:
            raise RendezvousError("kolo: elastic: kolorun offered %r: expected host:n,..."
                                  % spec)
        hosts.extend([host] * int(count))
    return hosts, added


def format_slots(hosts):
    """The inverse of parse_slots, in order of first appearance."""
    counts = collections.Counter(hosts)
    return ",".join("%s:%d" % (h, counts[h]) for h in dict.fromkeys(hosts))


def check_or_grow(env):
    """Whether the hosts differ from this incarnation's: (NO_UPDATE | REMOVED | ADDED |
    MIXED, ([], [])), or (GROW, (hosts, added)): free slots that the job may fill in place,
    one entry per slot, and the hosts among them that mpirun's allocation lacks."""
    answer = ask(env, ["CHECK", env.generation])
    if answer == ["SAME"]:
        return NO_UPDATE, ([], [])
    if len(answer) == 2 and answer[0] == "UPDATED" and answer[1] in _UPDATES:
        return _UPDATES[answer[1]], ([], [])
    if len(answer) == 2 and answer[0] == "GROW":
        return GROW, parse_slots(answer[1])
    raise RendezvousError("kolo: elastic: kolorun answered CHECK with %r" % " ".join(answer))


def check(env):
    """Whether the hosts differ from this incarnation's: NO_UPDATE, REMOVED, ADDED or
    MIXED (an offer to grow in place counts as ADDED)."""
    update, _ = check_or_grow(env)
    return ADDED if update == GROW else update


def grew(env, size, hosts):
    """Tells kolorun that the ranks of incarnation g and the new processes on ``hosts``
    (one entry per process) go on together at ``size`` (as incarnation g + 1)."""
    ask(env, ["GREW", env.generation, size, format_slots(hosts)])


def not_joined(env, hosts):
    """Tells kolorun that the new processes on ``hosts`` (one entry per slot) did not
    start or join: it offers those slots no more."""
    ask(env, ["NOTJOINED", env.generation, format_slots(hosts)])


def restart(env, commit):
    ask(env, ["RESTART", env.generation, commit])


def resumed(env, commit, size):
    ask(env, ["RESUMED", env.generation, commit, size])


def shrunk(env, size):
    """Tells kolorun that the survivors of incarnation g go on at ``size`` in place; raises
    RendezvousError with kolorun's reason when it refuses (--reset-limit reached, fewer than
    --min-np ranks left)."""
    ask(env, ["SHRUNK", env.generation, size])
