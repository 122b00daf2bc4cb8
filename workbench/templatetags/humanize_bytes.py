from django import template

from frontend.units import format_bytes, format_si

register = template.Library()
register.filter("bytes", format_bytes)
register.filter("si", format_si)


@register.filter
def pct(value) -> str:
    return "—" if value is None else f"{100 * float(value):.0f}%"
