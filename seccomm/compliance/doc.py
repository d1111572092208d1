"""The compliance report's document model and its two renderers.

:class:`Doc` is a list of blocks (headings, paragraphs, lists, tables, code) holding plain text;
:func:`to_markdown` and :func:`to_html` render it, escaping the text.  The HTML is one
self-contained file: inline CSS, no scripts, no external resources.
"""

from __future__ import annotations

import html


class Doc:
    """Blocks: ``("h", level, text)``, ``("p", text)``, ``("list", [text])``,
    ``("table", headers, rows)``, ``("code", text)``.  Text is plain; renderers escape it."""

    def __init__(self, title: str):
        self.title, self.blocks = title, []

    def h(self, level, text):
        self.blocks.append(("h", level, text))

    def p(self, text):
        self.blocks.append(("p", text))

    def items(self, items):
        self.blocks.append(("list", list(items)))

    def table(self, headers, rows):
        self.blocks.append(("table", list(headers), [[str(c) for c in r] for r in rows]))

    def code(self, text):
        self.blocks.append(("code", text))


def to_markdown(doc: Doc) -> str:
    """GitHub-flavoured Markdown: ``#`` headings one level below the title, pipe tables."""
    out = [f"# {doc.title}", ""]
    for b in doc.blocks:
        if b[0] == "h":
            out += ["#" * (b[1] + 1) + " " + b[2], ""]
        elif b[0] == "p":
            out += [b[1], ""]
        elif b[0] == "list":
            out += [f"- {i}" for i in b[1]] + [""]
        elif b[0] == "code":
            out += ["```", b[1], "```", ""]
        else:
            out += _md_table(b[1], b[2]) + [""]
    return "\n".join(out).rstrip() + "\n"


def _md_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    """Table lines; a ``|`` in a cell is escaped and a newline becomes a space."""

    def cell(c):
        return c.replace("|", "\\|").replace("\n", " ")

    return ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "---|" * len(headers)] + [
        "| " + " | ".join(cell(c) for c in r) + " |" for r in rows
    ]


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:70rem;margin:2rem auto;
padding:0 1rem;color:#1b1f24;line-height:1.45}
h1{border-bottom:2px solid #1b1f24;padding-bottom:.3rem}h2{margin-top:2rem;border-bottom:1px solid #ccd}
table{border-collapse:collapse;margin:.6rem 0;font-size:.92rem}
th,td{border:1px solid #bbc;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#eef}code,pre{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.88rem}
pre{background:#f4f4f8;padding:.6rem;overflow-x:auto}
td.pass{color:#05631f;font-weight:600}td.fail{color:#a40e0e;font-weight:700}
"""


def to_html(doc: Doc) -> str:
    """One self-contained HTML5 file (inline CSS); every text is escaped, and table cells that
    start with PASS or FAIL are marked with the class ``pass``/``fail``."""
    e = html.escape
    out = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f"<title>{e(doc.title)}</title>",
        f"<style>{_CSS}</style>",
        "</head>",
        "<body>",
        f"<h1>{e(doc.title)}</h1>",
    ]
    for b in doc.blocks:
        if b[0] == "h":
            out.append(f"<h{b[1] + 1}>{e(b[2])}</h{b[1] + 1}>")
        elif b[0] == "p":
            out.append(f"<p>{e(b[1])}</p>")
        elif b[0] == "list":
            out.append("<ul>" + "".join(f"<li>{e(i)}</li>" for i in b[1]) + "</ul>")
        elif b[0] == "code":
            out.append(f"<pre>{e(b[1])}</pre>")
        else:
            out.append(_html_table(b[1], b[2]))
    out += ["</body>", "</html>"]
    return "\n".join(out) + "\n"


def _html_table(headers: list[str], rows: list[list[str]]) -> str:
    e = html.escape

    def td(c):
        cls = ' class="pass"' if c.startswith("PASS") else ' class="fail"' if c.startswith("FAIL") else ""
        return f"<td{cls}>{e(c)}</td>"

    return (
        "<table><thead><tr>"
        + "".join(f"<th>{e(h)}</th>" for h in headers)
        + "</tr></thead><tbody>"
        + "".join("<tr>" + "".join(td(c) for c in r) + "</tr>" for r in rows)
        + "</tbody></table>"
    )
