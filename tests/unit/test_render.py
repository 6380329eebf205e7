"""The template environment's escaping: every template has a rule, every rule is idempotent and
leaves nothing that acts, and no template combines a macro's output with other text in an
expression (a macro's output is marked safe: text joined to it would skip the file's rule)."""
from __future__ import annotations


import jinja2
import pytest
from jinja2 import nodes

from deployer.render import TEMPLATES, c_text, environment, render, rule_for

TEMPLATE_FILES = sorted(p.relative_to(TEMPLATES) for p in TEMPLATES.rglob("*.j2"))


@pytest.mark.parametrize("path", TEMPLATE_FILES, ids=str)
def test_every_template_has_an_escaping_rule(path):
    rule_for(path.name)  # raises LookupError for an output language without a rule


def _calls_inside(node) -> bool:
    return any(isinstance(n, nodes.Call) for n in node.find_all(nodes.Call)) or isinstance(node, nodes.Call)


@pytest.mark.parametrize("path", [p for p in TEMPLATE_FILES if rule_for(p.name) is not None], ids=str)
def test_no_macro_output_is_joined_to_text(path):
    env = environment((str(path.parent),))
    tree = env.parse((TEMPLATES / path).read_text())
    for concat in tree.find_all(nodes.Concat):
        assert not any(_calls_inside(n) for n in concat.nodes), f"{path}:{concat.lineno}: ~ joins a call's output"
    for f in tree.find_all(nodes.Filter):
        if f.name == "join":
            assert not _calls_inside(f.node), f"{path}:{f.lineno}: join over a call's output"


def test_text_is_escaped_by_the_file_it_lands_in(tmp_path, monkeypatch):
    name = '*/ evil(); /*\n"#$(x)<b>'
    cases = (("t.c.j2", "/* {{ name }} */ int x;\n", lambda out: out.count("*/") == 1 and out.count("\n") == 1),
             ("CMakeLists.txt.j2", "# {{ name }}\n", lambda out: out.count("\n") == 1 and "$(" not in out),
             ("Makefile.j2", "X = {{ name }}\n", lambda out: out.count("\n") == 1 and "$(" not in out),
             ("t.html.j2", "<p>{{ name }}</p>\n", lambda out: "<b>" not in out and "&lt;b&gt;" in out))
    monkeypatch.setattr("deployer.render.TEMPLATES", tmp_path)
    for template, source, safe in cases:
        folder = tmp_path / template.replace(".", "_")
        folder.mkdir()
        (folder / template).write_text(source)
        environment.cache_clear()
        out = render((folder.name,), template, {"name": name})
        assert safe(out), (template, out)
    environment.cache_clear()


def test_c_text_breaks_what_opens_or_closes_comments_and_literals():
    assert c_text("a*/b/*c//d??/e\\f\"g'h") == "a* /b/ *c/ /d?-?/e<U+005C>f<U+0022>g<U+0027>h"


def test_a_template_without_a_rule_cannot_render(tmp_path, monkeypatch):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "notes.txt.j2").write_text("{{ name }}\n")
    monkeypatch.setattr("deployer.render.TEMPLATES", tmp_path)
    environment.cache_clear()
    with pytest.raises((LookupError, jinja2.TemplateError)):
        render(("x",), "notes.txt.j2", {"name": "n"})
    environment.cache_clear()
