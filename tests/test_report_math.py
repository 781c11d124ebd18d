"""TeX-ish fragments become Unicode and sub/sup tags, after escaping; nothing else changes.

On the old code the report showed ``$W_{Q}$`` raw (the module did not exist).
"""

import pytest

from implicit_em.report._math import tex_to_html


@pytest.mark.parametrize(
    ("tex", "html"),
    [
        ("$W_{Q}$", '<span class="math">W<sub>Q</sub></span>'),
        ("$\\partial L/\\partial d_{j}=+r_{j}$", '<span class="math">∂L/∂d<sub>j</sub>=+r<sub>j</sub></span>'),
        ("($r_{y}<1$)", '(<span class="math">r<sub>y</sub>&lt;1</span>)'),
        ("$r_{y}\\approx 1$", '<span class="math">r<sub>y</sub> ≈ 1</span>'),
        ("$\\lambda^{-1/2}v^{\\top}$", '<span class="math">λ<sup>−1/2</sup>v<sup>⊤</sup></span>'),
        ("$\\sum_{j}\\alpha_{j}k_{j}$", '<span class="math">Σ<sub>j</sub>α<sub>j</sub>k<sub>j</sub></span>'),
        ("$a \\leq b\\geq c$", '<span class="math">a ≤ b ≥ c</span>'),
        ("$|z|=\\mathrm{relu}(z)$", '<span class="math">|z|=relu(z)</span>'),
        ("$\\frac{1}{K}$", '<span class="math">1/K</span>'),
        ("$$ \\min_{j}d_{j} $$", '<span class="math display">min<sub>j</sub>d<sub>j</sub></span>'),
        ("$x_1^2$", '<span class="math">x<sub>1</sub><sup>2</sup></span>'),
    ],
)
def test_tex_fragment_to_html(tex: str, html: str) -> None:
    assert str(tex_to_html(tex)) == html


@pytest.mark.parametrize("text", ["costs $5 and $6", "plain text, no math", "echo $HOME", "a $ b"])
def test_text_without_math_is_only_escaped(text: str) -> None:
    assert str(tex_to_html(text)) == text


@pytest.mark.parametrize(
    "text",
    [
        "<script>alert(1)</script> $x$",
        "$<img src=x onerror=alert(1)>$",
        "$W_{<b>}$",
        "$\\mathrm{<script>}$",
        '" onmouseover="x',
    ],
)
def test_markup_in_the_text_is_escaped_before_conversion(text: str) -> None:
    out = str(tex_to_html(text))
    assert "<script" not in out and "<img" not in out and "<b>" not in out and '"' not in out.replace('"math"', "")


def test_an_unknown_command_shows_its_name() -> None:
    assert str(tex_to_html("$\\foo x$")) == '<span class="math">foox</span>'
