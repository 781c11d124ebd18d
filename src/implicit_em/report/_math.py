"""TeX-ish fragments in the experiments' strings (``$W_{Q}$``, ``$\\partial L/\\partial d_{j}=+r_{j}$``) as HTML.

The claims quote the paper, whose formulas are LaTeX between ``$`` signs; a browser shows them raw. The report
renders them with nothing external (no MathJax, no URL): Greek letters and operators become Unicode (``\\partial``
→ ∂, ``\\sum`` → Σ, ``\\leq`` → ≤), ``_{..}`` and ``^{..}`` become ``<sub>`` and ``<sup>``, and a math span is set
in italics. Safety first: the whole text is HTML-escaped *before* anything is converted, and the conversion only
adds the fixed tags ``<span class="math">``, ``<sub>`` and ``<sup>`` around text that was escaped, so no string
from ``results.json`` can inject markup. A command this table does not know is shown as its name (``\\foo`` →
``foo``), never dropped silently; a lone ``$`` (a price, a shell variable) is left as it is.
"""

import re

from markupsafe import Markup, escape

__all__ = ["tex_to_html"]

_SYMBOLS = {
    # Greek, lower then upper case
    "alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "epsilon": "ε", "varepsilon": "ε", "zeta": "ζ",
    "eta": "η", "theta": "θ", "kappa": "κ", "lambda": "λ", "mu": "μ", "nu": "ν", "xi": "ξ", "pi": "π",
    "rho": "ρ", "sigma": "σ", "tau": "τ", "phi": "φ", "varphi": "φ", "chi": "χ", "psi": "ψ", "omega": "ω",
    "Gamma": "Γ", "Delta": "Δ", "Theta": "Θ", "Lambda": "Λ", "Pi": "Π", "Sigma": "Σ", "Phi": "Φ", "Psi": "Ψ",
    "Omega": "Ω",
    # operators and relations
    "partial": "∂", "nabla": "∇", "sum": "Σ", "prod": "∏", "int": "∫", "infty": "∞", "approx": "≈",
    "leq": "≤", "le": "≤", "geq": "≥", "ge": "≥", "neq": "≠", "ne": "≠", "propto": "∝", "sim": "∼",
    "cdot": "·", "times": "×", "pm": "±", "mp": "∓", "to": "→", "rightarrow": "→", "leftarrow": "←",
    "Rightarrow": "⇒", "in": "∈", "top": "⊤", "dagger": "†", "ell": "ℓ", "mid": "∣", "|": "‖",
    "langle": "⟨", "rangle": "⟩", "ldots": "…", "dots": "…", "cdots": "⋯",
    # named functions, upright
    "log": "log", "exp": "exp", "min": "min", "max": "max", "det": "det", "tr": "tr", "softmax": "softmax",
    # spacing and escaped characters
    ",": " ", ";": " ", ":": " ", "!": "", "quad": "\u2003", "qquad": "\u2003\u2003", " ": " ",
    "{": "{", "}": "}", "%": "%", "#": "#", "_": "_", "&amp;": "&amp;",
}  # fmt: skip
_FONTS = ("mathrm", "mathbf", "mathit", "mathcal", "operatorname", "text", "textrm", "boldsymbol", "mathbb")
# pandoc's rule for inline math: no space just inside either $, no digit just after the closing one ("$5 and $6")
_MATH = re.compile(r"\$\$(.+?)\$\$|\$(?!\s)([^$\n]+?)(?<!\s)\$(?!\d)", re.S)
_RELATIONS = frozenset({"approx", "leq", "le", "geq", "ge", "neq", "ne", "propto", "sim", "to", "rightarrow", "in"})
_FUNCTIONS = frozenset({"log", "exp", "min", "max", "det", "tr", "softmax"})
_COMMAND = re.compile(r"\\(&amp;|[A-Za-z]+|.)")


def _group(s: str, i: int) -> tuple[str, int]:
    """The argument starting at ``s[i]``: a ``{...}`` group (braces balanced), a command or one character."""
    if i >= len(s):
        return "", i
    if s[i] == "{":
        depth, j = 0, i
        while j < len(s):
            depth += {"{": 1, "}": -1}.get(s[j], 0)
            if depth == 0:
                return s[i + 1 : j], j + 1
            j += 1
        return s[i + 1 :], len(s)  # unbalanced: take the rest
    m = _COMMAND.match(s, i)
    if m:
        return m.group(0), m.end()
    if s.startswith("&", i):  # an escaped entity (&lt; &amp; ...) is one character
        end = s.find(";", i)
        if end != -1:
            return s[i : end + 1], end + 1
    return s[i], i + 1


def _convert(s: str) -> str:
    """Already-escaped TeX ``s`` as HTML: commands to Unicode, sub/superscripts to tags, braces dropped."""
    out: list[str] = []
    i = 0
    while i < len(s):
        c = s[i]
        if c in "_^":
            arg, i = _group(s, i + 1)
            tag = "sub" if c == "_" else "sup"
            out.append(f"<{tag}>{_convert(arg)}</{tag}>")
        elif c == "\\":
            m = _COMMAND.match(s, i)
            name = m.group(1) if m else ""
            i = m.end() if m else i + 1
            if name in _FONTS:
                arg, i = _group(s, i)
                out.append(_convert(arg))
            elif name == "frac":
                num, i = _group(s, i)
                den, i = _group(s, i)
                out.append(f"{_convert(num)}/{_convert(den)}")
            elif name == "sqrt":
                arg, i = _group(s, i)
                out.append(f"√({_convert(arg)})")
            elif name in ("left", "right", "big", "Big", "bigl", "bigr", "Bigl", "Bigr", "displaystyle"):
                pass  # sizing: the delimiter that follows is kept as it is
            elif name in _RELATIONS:
                out.append(f" {_SYMBOLS[name]} ")  # spaced as TeX spaces a relation
                while i < len(s) and s[i] == " ":
                    i += 1
            else:
                out.append(_SYMBOLS.get(name, name))
                if name.isalpha() and name not in _FUNCTIONS:
                    while i < len(s) and s[i] == " ":  # TeX ends a command name at the space, and drops it
                        i += 1
        elif c in "{}":
            i += 1
        elif c == "-":
            out.append("−")  # a minus sign, not a hyphen
            i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def tex_to_html(text: str) -> Markup:
    """``text`` HTML-escaped, with each ``$...$`` or ``$$...$$`` fragment converted to Unicode and sub/sup tags.

    >>> str(tex_to_html("the parameters $W_{Q}$ & <b>"))
    'the parameters <span class="math">W<sub>Q</sub></span> &amp; &lt;b&gt;'
    """
    escaped = str(escape(text))

    def repl(m: re.Match[str]) -> str:
        display = m.group(1) is not None
        body = re.sub(r" {2,}", " ", _convert((m.group(1) if display else m.group(2)).strip())).strip()
        cls = "math display" if display else "math"
        return f'<span class="{cls}">{body}</span>'

    return Markup(_MATH.sub(repl, escaped))
