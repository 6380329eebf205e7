"""Templates to text: one jinja2 environment, one escaping rule per output language.

Every ``{{ value }}`` a template writes passes through the rule of the file it renders into,
chosen from the template's name (``*.c.j2`` -> C, ``CMakeLists.txt.j2`` -> CMake, ...), so a
template cannot forget it. A plain ``str`` is text (a name from a model, a comment): the rule
makes it harmless wherever it lands in that language. Text computed here that must go out
unchanged (C expressions, arrays spanning lines) is marked ``Code``; numbers pass as they are.
HTML templates use jinja2's own autoescaping. A template whose name matches no rule cannot be
rendered.
"""
from __future__ import annotations

import functools
import hashlib
import re
from pathlib import Path

import jinja2
import markupsafe
import numpy as np

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"


class Code(str):
    """Text this program computed for the output language (a C expression, an array's
    initializer): rendered as it is. Never wrap text that came from a model."""


def _visible(ch: str) -> str:
    return f"<U+{ord(ch):04X}>"


def _until_stable(text: str, pairs: tuple[tuple[str, str], ...]) -> str:
    while True:
        before = text
        for old, new in pairs:
            text = text.replace(old, new)
        if text == before:
            return text


# Sequences that change the meaning of C text around them: comment delimiters, a line comment,
# trigraphs (C99 turns ??/ into a backslash, and a backslash before a newline joins lines).
_C_BREAKS = (("/*", "/ *"), ("*/", "* /"), ("//", "/ /"), ("??", "?-?"))


def c_text(text: str) -> str:
    """Text safe anywhere in C source (a block or line comment, a string or character literal,
    between tokens): printable ASCII without backslashes, quotes, comment delimiters or
    trigraphs; every other character is shown as <U+XXXX> (so newlines, NUL, ESC and
    bidirectional controls never reach the compiler)."""
    out = "".join(ch if " " <= ch <= "~" and ch not in "\\\"'" else _visible(ch) for ch in str(text))
    return _until_stable(out, _C_BREAKS)


_CMAKE_SAFE = re.compile(r"[A-Za-z0-9 _.,:=+\-/@%]")


def cmake_text(text: str) -> str:
    """Text safe in a CMake comment or unquoted argument: no newline, quote, variable or
    generator-expression reference, list separator, parenthesis or bracket."""
    return "".join(ch if _CMAKE_SAFE.fullmatch(ch) else "_" for ch in str(text))


_MAKE_SAFE = re.compile(r"[A-Za-z0-9 _.,=+\-/@%]")


def make_text(text: str) -> str:
    """Text safe in a Makefile and in the shell commands of its recipes: no newline, variable
    reference, comment, line continuation, quote, redirection or command separator."""
    return "".join(ch if _MAKE_SAFE.fullmatch(ch) else "_" for ch in str(text))


# template file name -> the rule for its output language (the first that matches)
RULES: tuple[tuple[str, object], ...] = (
    (r".*\.(c|h|ld)\.j2", c_text),
    (r"(.*/)?CMakeLists\.txt\.j2", cmake_text),
    (r"(.*/)?Makefile\.j2", make_text),
    (r".*\.html\.j2", None),  # jinja2's autoescaping
)


@functools.lru_cache(maxsize=None)
def rule_for(template_name: str):
    for pattern, rule in RULES:
        if re.fullmatch(pattern, template_name):
            return rule
    raise LookupError(f"template {template_name}: no escaping rule for its output language")


@jinja2.pass_context
def _finalize(context: jinja2.runtime.Context, value):
    """Every {{ }} output: numbers, Code and the output of macros as they are, other text
    through the rule of the file being rendered. (Every template is rendered with autoescaping,
    so that a macro's output arrives marked safe; the rule's result is marked safe too, so that
    the HTML escape only ever applies to HTML templates.)"""
    if isinstance(value, markupsafe.Markup):
        return value
    rule = rule_for(context.name)
    if rule is None:  # HTML: jinja2 escapes it
        return value
    if isinstance(value, Code) or isinstance(value, (int, float, np.integer, np.floating)):
        return markupsafe.Markup(value)
    return markupsafe.Markup(rule(str(value)))


# ---- C literal filters (the only place numbers become C text) -----------------

def c_int(v: int) -> Code:
    return Code(_int_text(int(v)))


def c_int64(v: int) -> Code:
    return c_int(v) if -(1 << 31) <= v < (1 << 31) else Code(f"{int(v)}LL")


def _float_text(v: float) -> str:
    text = f"{np.float32(v).item():.9g}"
    return f"{text}f" if any(ch in text for ch in ".e") else f"{text}.0f"


def _double_text(v: float) -> str:
    return f"{float(v):.17g}"


def c_float(v: float) -> Code:
    """A float32 literal that reads back to exactly the same float."""
    return Code(_float_text(v))


def c_double(v: float) -> Code:
    return Code(_double_text(v))


def _int_text(v: int) -> str:
    return "(-2147483647 - 1)" if v == -(1 << 31) else str(v)


def c_array(values, per_line: int = 16) -> Code:
    flat = np.asarray(values).reshape(-1)
    fmt = {"f4": _float_text, "f8": _double_text}.get(flat.dtype.str[1:], _int_text)
    items = [fmt(v) for v in flat.tolist()]
    return Code(",\n".join("    " + ", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)))


def c_comment_lines(text: str, width: int = 92, prefix: str = " * ") -> Code:
    """Our own text (never a model's) for a block comment, wrapped at ``width`` columns, each
    further line led by ``prefix``."""
    words, lines, line = _until_stable(str(text), _C_BREAKS).split(), [], ""
    for w in words:
        if line and len(line) + 1 + len(w) > width:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}" if line else w
    return Code(f"\n{prefix}".join([*lines, line] if line else lines))


def c_loop(var: str, count, reverse: bool = False) -> Code:
    """A counting loop's header over [0, count): upwards, or downwards (a layer walking its output
    backwards, which then starts above the input it consumes: layer_analyzer.overlap)."""
    if reverse:
        last = count - 1 if isinstance(count, int) else f"{count} - 1"
        return Code(f"for (int32_t {var} = {last}; {var} >= 0; --{var})")
    return Code(f"for (int32_t {var} = 0; {var} < {count}; ++{var})")


@functools.lru_cache(maxsize=None)
def environment(dirs: tuple[str, ...]) -> jinja2.Environment:
    """The environment of the template folders ``dirs`` (searched in order, then templates/ itself,
    where a kernel family's templates are named by their folder: "<family>/kernels.c.j2"), kept: it
    caches the compiled templates (compiling them took most of a small model's emit time)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader([*(str(TEMPLATES / d) for d in dirs), str(TEMPLATES)]),
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
        keep_trailing_newline=True, autoescape=True, finalize=_finalize)
    env.filters.update(c_int=c_int, c_float=c_float, c_double=c_double, c_array=c_array, c_comment=c_text)
    env.globals.update(c_loop=c_loop)
    return env


def render(dirs: tuple[str, ...], template: str, context: dict) -> str:
    return environment(dirs).get_template(template).render(context)


# ---- names ----------------------------------------------------------------------

# Target names CMake keeps for itself (Makefile and IDE generators), and C's keywords: a
# library named after a model must not take them.
CMAKE_RESERVED = frozenset({"all", "all_build", "help", "install", "preinstall", "clean", "edit_cache",
                            "rebuild_cache", "zero_check", "test", "run_tests", "package", "package_source",
                            "install_local", "install_strip", "list_install_components"})
C_KEYWORDS = frozenset("""auto break case char const continue default do double else enum extern float for goto if
inline int long register restrict return short signed sizeof static struct switch typedef union unsigned void
volatile while bool true false""".split())
IDENT_MAX = 48  # characters of a library name (file names such as <name>_engine.c stay short)


def c_identifier(name: str) -> str:
    """A model's name as an ASCII C identifier, CMake target and file-name prefix: lower case,
    [a-z0-9_], at most IDENT_MAX characters (a longer name keeps its start and a digest of the
    whole), never a C keyword or a target name CMake reserves."""
    ident = re.sub(r"[^a-z0-9_]+", "_", str(name).lower()).strip("_") or "model"
    ident = re.sub(r"_+", "_", ident)
    if len(ident) > IDENT_MAX:
        digest = hashlib.sha256(str(name).encode("utf-8", "surrogateescape")).hexdigest()[:8]
        ident = f"{ident[:IDENT_MAX - 9].rstrip('_')}_{digest}"
    if ident[0].isdigit() or ident in CMAKE_RESERVED or ident in C_KEYWORDS:
        ident = f"m_{ident}"
    return ident


# ---- the terminal ------------------------------------------------------------------

ERROR_CHARS = 2000  # an error line quotes at most this much (a model can hold megabytes of text)


def terminal_text(text: str, limit: int | None = None) -> str:
    """Text for a terminal: control characters (escape sequences, carriage returns, NUL) and
    bidirectional controls shown as \\xNN / \\uNNNN, newlines and tabs kept; with ``limit``,
    cut to that many characters."""
    text = str(text)
    if limit is not None and len(text) > limit:
        text = f"{text[:limit]}... ({len(text) - limit:,} more characters)"
    return "".join(ch if ch in "\n\t" or not _unsafe_on_terminal(ch) else
                   (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}") for ch in text)


def _unsafe_on_terminal(ch: str) -> bool:
    o = ord(ch)
    return o < 0x20 or 0x7F <= o < 0xA0 or 0x200B <= o <= 0x200F or 0x202A <= o <= 0x202E \
        or 0x2066 <= o <= 0x2069 or o in (0x061C, 0xFEFF) or 0xD800 <= o <= 0xDFFF  # and undecodable bytes


def display(name: str) -> str:
    """A name from a model inside a line for people: like terminal_text, and a newline or tab it
    holds is shown as \\n or \\t (it must not start a line that reads as ours)."""
    return terminal_text(str(name).replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t"))
