"""How kolo names the operations of a call, in every binding.

The core pairs operations across ranks by name. ``None`` (or "") leaves the name to the
core, which numbers unnamed operations in the order each rank starts them and records the
Python line that started one for its errors. A call that starts several operations names
them after itself: the members of a split group ``name.0``, ``name.1`` (:func:`member_name`),
the parts of a call made of several collectives ``name.<part>`` (:func:`part_name`: an
object's size and bytes, a sparse tensor's indices and values)."""


def member_name(name, index, count):
    """The name of member ``index`` of ``count`` operations started for one call named
    ``name`` (unnamed stays unnamed; a single one keeps the name)."""
    if not name or count == 1:
        return name or ""
    return "%s.%d" % (name, index)


def part_name(name, part):
    """The name of part ``part`` ("sz", "indices", ...) of a call named ``name`` (unnamed
    stays unnamed)."""
    return None if not name else "%s.%s" % (name, part)
