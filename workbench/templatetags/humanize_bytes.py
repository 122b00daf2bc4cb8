from django import template

register = template.Library()


@register.filter
def bytes(value) -> str:  # noqa: A001 - template filter name
    if value is None:
        return "—"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(value)


@register.filter
def si(value) -> str:
    """4_100_000_000 -> '4.10 G' (decimal prefixes, as MACs and parameters are quoted)."""
    if value is None:
        return "—"
    number = float(value)
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(number) >= scale:
            return f"{number / scale:.2f} {prefix}"
    return f"{number:.0f} "


@register.filter
def pct(value) -> str:
    return "—" if value is None else f"{100 * float(value):.0f}%"
