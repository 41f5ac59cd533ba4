"""The README and docs/ against the code: every code block and command in them is run or
checked here, so that no page drifts from what frugal does. How each kind is checked:

- ```c: compiled against include/ and the build's libfrugal.so, and run; it must exit 0. A
  block whose first line is a comment naming a file (`/* overflow.c */`) is written under that
  name instead, for the page's ```sh lines to build and run.
- ```sh: each line is one command, checked by the first rule of RULES its text matches (a line
  no rule matches fails): run in a scratch directory that holds `build` (the build) and
  `.venv/bin/frugal` (this Python's frugal), with placeholders (PROGRAM ARGS, BIGFILE,
  script.sql) replaced by real inputs. Commands that take minutes are checked lightly: `make`
  targets with `make -n`, `frugal bench` in `--smoke` mode, install lines against the install
  test (tests/install) that ctest runs. A line commented `# aborts` must die of SIGABRT; any
  other must succeed.
- ```cmake: its lines must be those of tests/install/CMakeLists.txt, which ctest's install test
  builds against a real install.
- ```text after a ```c or ```sh block: what that block prints (stdout and stderr). Each line
  must come out, in order; numbers and hex addresses stand for any, runs of spaces for any
  spacing, and a line "…" for any lines.

And the pages' other promises: the options tables are FG_OPTIONS (include/frugal.h); docs/cli.md
holds each subcommand's --help as it prints; the ledger page's tables are the JSON schema's
fields, in its words; the messages page names every message src/ prints; links resolve; no page
(nor a comment in bench/ or python/frugal outside experiments/) tells how or when it was made;
the README stays short and its results table is the one `frugal table` writes."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from frugal import results_table
from frugal.cli import build_parser

from conftest import build_dir

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
BUILD = build_dir(("libfrugal.so",))
needs_build = pytest.mark.skipif(BUILD is None, reason="libfrugal.so not built: set FRUGAL_BUILD (make test does)")
HELP_COLUMNS = "100"  # docs/cli.md shows --help as it prints at this width


@dataclass
class Block:
    page: Path
    line: int  # of the opening fence, from 1
    lang: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    found, lines, i = [], page.read_text().splitlines(), 0
    while i < len(lines):
        m = re.match(r"^```(\S*)\s*$", lines[i])
        if m:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            found.append(Block(page, i + 1, m.group(1), "\n".join(lines[i + 1:end]) + "\n"))
            i = end
        i += 1
    return found


def all_blocks() -> list[Block]:
    return [b for p in PAGES for b in blocks(p)]


def expected_after(block: Block) -> Block | None:
    """The ```text block that shows what `block` prints: the page's next block, if text."""
    page = blocks(block.page)
    i = next(k for k, b in enumerate(page) if b.line == block.line)
    return page[i + 1] if i + 1 < len(page) and page[i + 1].lang == "text" else None


# ---- expected output ------------------------------------------------------------------------

def line_pattern(line: str) -> re.Pattern:
    """A shown output line as a pattern: numbers and hex addresses stand for any, spaces for any."""
    out = []
    for tok in re.split(r"(0x[0-9a-f]+|\d+(?:[.,]\d+)*|\s+)", line.strip()):
        if re.fullmatch(r"0x[0-9a-f]+", tok):
            out.append(r"0x[0-9a-f]+")
        elif re.fullmatch(r"\d+(?:[.,]\d+)*", tok):
            out.append(r"[\d.,]+")
        elif tok and tok.isspace():
            out.append(r"\s+")
        else:
            out.append(re.escape(tok))
    text = "".join(out)
    text = re.sub(r"(\\s\+)(B|KiB|MiB|GiB)\b", r"\1(?:B|KiB|MiB|GiB)", text)  # 1.5 KiB may read 900 B
    return re.compile(text)


def check_output(shown: Block, output: str, source: Block) -> None:
    """Each line of `shown` comes out of `source`, in order ("…": any lines between)."""
    got = [line.strip() for line in output.splitlines()]
    at = 0
    for want in shown.text.splitlines():
        if not want.strip() or want.strip() == "…":
            continue
        pattern = line_pattern(want)
        for k in range(at, len(got)):
            if pattern.fullmatch(got[k]):
                at = k + 1
                break
        else:
            raise AssertionError(f"{shown.where}: {want!r} not in the output of {source.where} "
                                 f"(after line {at}):\n{output[-3000:]}")


# ---- the scratch directory commands run in ---------------------------------------------------

APP_C = '#include <stdlib.h>\nint main(void) { char *p = malloc(100); free(p); return p == NULL; }\n'
SQL = ("create table t(a integer, b text);\n"
       "with recursive n(i) as (select 1 union all select i + 1 from n where i < 20000) "
       "insert into t select i, hex(randomblob(20)) from n;\n"
       "create index tb on t(b);\nselect count(*), sum(length(b)) from t;\n")
# Placeholders, and files the pages write to /tmp, kept in the scratch directory instead.
PLACEHOLDERS = {"PROGRAM ARGS": "sort /etc/passwd", "BIGFILE": "bigfile.txt", "=/tmp/": "=$PWD/"}


def substitute(command: str) -> str:
    for k, v in PLACEHOLDERS.items():
        command = command.replace(k, v)
    return command


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if BUILD is None:
        pytest.skip("libfrugal.so not built: set FRUGAL_BUILD (make test does)")
    d = tmp_path_factory.mktemp("docs")
    (d / "build").symlink_to(BUILD.resolve())
    venv_bin = d / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "frugal").write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m frugal \"$@\"\n")
    (venv_bin / "frugal").chmod(0o755)
    (d / "app.c").write_text(APP_C)
    (d / "script.sql").write_text(SQL)
    (d / "bigfile.txt").write_text("".join(f"{(i * 7919) % 100003:06d} line\n" for i in range(50000)))
    # For `frugal table`: a lab run's results.json (synthetic) and a page with the markers.
    from test_results_table import synthetic_results
    (d / "out" / "lab").mkdir(parents=True)
    synthetic_results(d / "out" / "lab")
    (d / "README.md").write_text(f"# x\n\n{results_table.START}\n{results_table.END}\n")
    return d


def run_shell(command: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRUGAL_")}
    env.update(PATH=f"{cwd / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}", COLUMNS=HELP_COLUMNS,
               FRUGAL_BUILD=str(cwd / "build"))
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def split_comment(line: str) -> tuple[str, str]:
    """The command and its trailing `# comment` (a # outside quotes, after a space)."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


# ---- the rules for shell lines ---------------------------------------------------------------

Rule = Callable[[str, str, Path, Block], str]  # (command, comment, scratch, block) -> its output


def light_make(command: str, comment: str, cwd: Path, block: Block) -> str:
    """`make TARGET ...` takes minutes (or installs): the Makefile must have the target and
    `make -n` must plan it without error."""
    args = shlex.split(command)[1:]
    args = [a if not a.startswith("PREFIX=") else f"PREFIX={cwd / 'prefix'}" for a in args]
    proc = subprocess.run(["make", "-n", *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, BUILD=str(BUILD)))
    assert proc.returncode == 0, f"{block.where}: make -n {' '.join(args)}: {proc.stderr[-1000:]}"
    return proc.stdout


def as_install_test(command: str, comment: str, cwd: Path, block: Block) -> str:
    """pkg-config needs an install: ctest's install test (tests/install/check.sh) installs into a
    scratch prefix and builds with this very command."""
    check = (ROOT / "tests" / "install" / "check.sh").read_text()
    assert command in check, f"{block.where}: {command!r} is not what tests/install/check.sh runs"
    return ""


def compile_run(command: str, comment: str, cwd: Path, block: Block) -> str:
    """A compiler line: run as written in the scratch directory (the page's named C blocks and
    app.c are there); the program it builds is run once, if no later line of the block does."""
    out = run_and_check(command, comment, cwd, block)
    exe = shlex.split(command)[shlex.split(command).index("-o") + 1]
    if f"./{exe}" not in block.text:
        out += run_and_check(f"./{exe}", "", cwd, block)
    return out


def frugal_command(command: str, comment: str, cwd: Path, block: Block) -> str:
    """The CLI, as written, but `frugal bench` in --smoke mode (the others take minutes)."""
    argv = shlex.split(substitute(command))
    i = next(k for k, a in enumerate(argv) if a.endswith("frugal"))
    if argv[i + 1:i + 2] == ["bench"] and not {"--quick", "--full", "--smoke"} & set(argv):
        argv.insert(i + 2, "--smoke")
    return run_and_check(shlex.join(argv), comment, cwd, block)


def run_and_check(command: str, comment: str, cwd: Path, block: Block) -> str:
    """Run the line as a shell would; `# aborts` lines must die of SIGABRT, others succeed."""
    proc = run_shell(substitute(command), cwd)
    out = proc.stdout + proc.stderr
    if comment.startswith("aborts"):  # bash -c runs a lone command in its own place: -6, else 128 + 6
        assert proc.returncode in (-6, 128 + 6), f"{block.where}: {command!r} should abort, exit {proc.returncode}:\n{out[-2000:]}"
    else:
        assert proc.returncode == 0, f"{block.where}: {command!r} exit {proc.returncode}:\n{out[-3000:]}"
    return out


def bench_script(command: str, comment: str, cwd: Path, block: Block) -> str:
    """A lab script of bench/ (minutes of a real server): it must exist, be executable and
    parse; test_live.py runs it, shortened."""
    script = ROOT / shlex.split(command)[0]
    assert script.is_file() and os.access(script, os.X_OK), f"{block.where}: {script} is not an executable script"
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, f"{block.where}: bash -n {script}: {proc.stderr}"
    return ""


def in_script(command: str, comment: str, cwd: Path, block: Block) -> str:
    """Lines that only make sense with the block's other lines (`kill $!`): run with them."""
    raise AssertionError(f"{block.where}: {command!r} runs only in a block with a program started in the background")


ENV = r"(?:\w+=\S+\s+)*"
RULES: list[tuple[str, Rule]] = [
    (r"make(\s+[\w-]+)*(\s+PREFIX=\S+)?", light_make),
    (r"pkg-config --cflags --libs frugal", as_install_test),
    (r"cc\s.*-o\s+\S+.*", compile_run),
    (ENV + r"(\.venv/bin/)?frugal(\s.*)?", frugal_command),
    (ENV + r"LD_PRELOAD=\S+\s+.+", run_and_check),
    (r"sleep [\d.]+", run_and_check),
    (r"kill \$!", in_script),
    (r"bench/[\w-]+\.sh(\s.*)?", bench_script),
]


def run_script(block: Block, cwd: Path) -> str:
    """A block that starts a program in the background (a line ending in &) and looks at it:
    run whole, as one script, stopping at the first failure; the program is killed at the end
    if the block did not."""
    script = "set -e\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + substitute(block.text)
    proc = run_shell(script, cwd)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{block.where}: exit {proc.returncode}:\n{out[-3000:]}"
    return out


def shell_lines(block: Block) -> list[tuple[str, str]]:
    lines = [split_comment(line) for line in block.text.splitlines()]
    return [(c, m) for c, m in lines if c]


# ---- the tests -------------------------------------------------------------------------------

def test_every_block_has_a_known_language() -> None:
    for b in all_blocks():
        assert b.lang in ("sh", "c", "text", "cmake"), f"{b.where}: a ```{b.lang} block, which no test checks"
        if b.lang == "text":
            page = blocks(b.page)
            i = page.index(b)
            assert i > 0 and page[i - 1].lang in ("sh", "c"), f"{b.where}: output of no command"


def test_every_shell_line_has_a_rule() -> None:
    for b in all_blocks():
        if b.lang != "sh":
            continue
        for command, _ in shell_lines(b):
            assert any(re.fullmatch(p, command) for p, _ in RULES), f"{b.where}: no rule checks {command!r}"


def shell_blocks() -> list[Block]:
    return [b for b in all_blocks() if b.lang == "sh"]


@needs_build
@pytest.mark.parametrize("block", shell_blocks(), ids=lambda b: b.where)
def test_shell_block(block: Block, scratch: Path) -> None:
    for b in blocks(block.page):  # the page's named C files, for its cc lines
        name = re.match(r"/\* (\w+\.c) \*/", b.text) if b.lang == "c" else None
        if name:
            (scratch / name.group(1)).write_text(b.text)
    output = ""
    if any(command.endswith("&") for command, _ in shell_lines(block)):
        output = run_script(block, scratch)
        print(f"{block.where}: ran as one script")
    for command, comment in ([] if output else shell_lines(block)):
        rule = next(r for p, r in RULES if re.fullmatch(p, command))
        output += rule(command, comment, scratch, block)
        print(f"{block.where}: checked {command!r} ({rule.__name__})")
    shown = expected_after(block)
    if shown is not None:
        check_output(shown, output, block)


def c_blocks() -> list[Block]:
    return [b for b in all_blocks() if b.lang == "c" and not re.match(r"/\* \w+\.c \*/", b.text)]


@needs_build
@pytest.mark.parametrize("block", c_blocks(), ids=lambda b: b.where)
def test_c_block(block: Block, tmp_path: Path) -> None:
    src = tmp_path / "example.c"
    src.write_text(block.text)
    exe = tmp_path / "example"
    cc = subprocess.run(["cc", "-std=gnu11", "-Wall", "-Wextra", "-Werror", f"-I{ROOT / 'include'}", str(src),
                         "-o", str(exe), f"-L{BUILD}", "-lfrugal", f"-Wl,-rpath,{BUILD.resolve()}"],
                        capture_output=True, text=True)
    assert cc.returncode == 0, f"{block.where}: does not compile:\n{cc.stderr}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRUGAL_")}
    proc = subprocess.run([str(exe)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{block.where}: exit {proc.returncode}\n{proc.stdout}{proc.stderr}"
    shown = expected_after(block)
    if shown is not None:
        check_output(shown, proc.stdout + proc.stderr, block)


def test_cmake_blocks_are_the_install_test_s() -> None:
    consumer = (ROOT / "tests" / "install" / "CMakeLists.txt").read_text()
    for b in all_blocks():
        if b.lang == "cmake":
            for line in b.text.splitlines():
                # The install test's target is `consumer` where the README's is `app`.
                assert line.replace("(app ", "(consumer ") in consumer, f"{b.where}: {line!r} is not in the install test"


def test_inline_make_targets_exist() -> None:
    """`make X` in running text (`make check-real`, `make fuzz`) names a target of the Makefile."""
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([\w-]+):", makefile, re.M))
    for page in PAGES:
        for target in re.findall(r"`make ([\w-]+)[^`]*`", page.read_text()):
            if target == "check-real" and target not in targets:
                pytest.xfail("make check-real: its target is not in the Makefile yet")
            assert target in targets, f"{page.name}: `make {target}` is no target of the Makefile"


# ---- options -------------------------------------------------------------------------------

def fg_options() -> list[dict[str, str]]:
    """FG_OPTIONS as frugal.h lists them: name, default, range and help, as the tables show them."""
    header = (ROOT / "include" / "frugal.h").read_text()
    text = header[header.index("#define FG_OPTIONS(X)"):header.index("typedef enum fg_option_e")]
    text = text.replace("\\\n", " ")
    rows = re.findall(r'X\((\w+),\s*([^,]+),\s*([^,]+),\s*([^,]+),\s*([01]),\s*((?:"(?:[^"\\]|\\.)*"\s*)+)\)', text)
    assert len(rows) >= 10, "FG_OPTIONS not parsed"

    def value(expr: str) -> str:
        m = re.fullmatch(r"(-?\d+)L?(?:\s*<<\s*(\d+))?", expr.strip())
        assert m, f"FG_OPTIONS: cannot read {expr!r}"
        return str(int(m.group(1)) << int(m.group(2) or 0))

    out = []
    for name, default, lo, hi, is_string, helps in rows:
        text_help = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', helps))
        string = is_string == "1"
        out.append({"variable": f"`FRUGAL_{name}`", "default": "–" if string else value(default),
                    "range": "text" if string else f"{value(lo)} … {value(hi)}", "meaning": text_help})
    return out


def table_rows(page: Path, first: str) -> list[dict[str, str]]:
    """The rows of the page's table whose heading row starts with `first`."""
    lines = page.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first} |"))
    head = [c.strip() for c in lines[start].strip().strip("|").split("|")]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(head, (c.strip() for c in line.strip().strip("|").split("|")))))
    return rows


def test_readme_options_table_is_fg_options() -> None:
    want = [{k: o[k] for k in ("variable", "default", "meaning")} for o in fg_options()]
    assert table_rows(ROOT / "README.md", "variable") == want


def test_options_page_table_is_fg_options() -> None:
    assert table_rows(ROOT / "docs" / "options.md", "variable") == fg_options()


def test_options_page_says_something_of_every_option() -> None:
    text = (ROOT / "docs" / "options.md").read_text()
    for o in fg_options():
        assert f"**{o['variable']}**" in text, f"docs/options.md: no paragraph on {o['variable']}"


# ---- the command line ----------------------------------------------------------------------

def words(text: str) -> str:
    return " ".join(text.split())


def test_cli_page_holds_every_help_text() -> None:
    """docs/cli.md says what --help says, in the same words: every description, every
    subcommand's one-line help and every option's help (the --help outputs shown there are
    run and compared by test_shell_block)."""
    page = words((ROOT / "docs" / "cli.md").read_text())
    parser = build_parser()
    parsers = [parser]
    for action in parser._subparsers._group_actions:  # the subcommands
        for choice in action._choices_actions:
            assert words(choice.help) in page, f"docs/cli.md lacks {choice.help!r}"
        parsers += list(action.choices.values())
    for p in parsers:
        assert words(p.description) in page, f"docs/cli.md lacks {p.prog}'s description"
        for action in p._actions:
            if action.help and action.help != "==SUPPRESS==" and "%" not in action.help:
                assert words(action.help) in page, f"docs/cli.md lacks {p.prog} {action.option_strings}'s help"
    for name in ("bench", "run", "compare", "table"):
        assert f"```sh\nfrugal {name} --help\n```" in (ROOT / "docs" / "cli.md").read_text()


def test_readme_first_commands_say_what_their_help_says() -> None:
    readme = (ROOT / "README.md").read_text()
    sub = build_parser()._subparsers._group_actions[0]
    for choice in sub._choices_actions:
        if choice.dest in ("run", "compare"):
            assert f"# {choice.help}" in readme, f"README: `frugal {choice.dest}` not described as its help says"


# ---- the ledger page against the schema ----------------------------------------------------

def test_ledger_page_tables_are_the_schema_s() -> None:
    schema = json.loads((ROOT / "python" / "frugal" / "ledger.schema.json").read_text())
    page = (ROOT / "docs" / "ledger.md").read_text()
    for name, prop in schema["properties"].items():
        assert f"| `{name}` | {prop['description']} |" in page, f"docs/ledger.md: section {name}"
    for section in ("counters", "held"):
        for name, prop in schema["properties"][section]["properties"].items():
            assert f"| `{name}` | {prop['description']} |" in page, f"docs/ledger.md: {section}.{name}"


# ---- messages ------------------------------------------------------------------------------

def src_messages() -> list[str]:
    """What src/ prints: the text of every misuse, warning and event call, the give-back lines,
    and every literal that starts a `frugal: ` line, each cut at its first conversion."""
    found = set()
    for f in sorted((ROOT / "src").glob("*.c")):
        text = re.sub(r"/\*[\s\S]*?\*/|//[^\n]*", "", f.read_text())  # code only
        for call in re.finditer(r"_fg_(misuse|warning|event)\(\s*(?:\d+,\s*)?\"((?:[^\"\\]|\\.)*)\"", text):
            found.add(call.group(2))
        for m in re.finditer(r"\[FG_BY_\w+\]\s*=\s*\"((?:[^\"\\]|\\.)*)\"", text):  # init.c's give-back lines
            found.add(m.group(1))
        for m in re.finditer(r"\"frugal: ((?:[^\"\\]|\\.)*)\"", text):
            found.add(m.group(1))
    cut = {re.split(r"%|\\n", m)[0].strip().rstrip(":").strip() for m in found}
    return sorted(m for m in cut if m and m not in ("warning", "event"))


def test_messages_page_names_every_message_of_src() -> None:
    page = (ROOT / "docs" / "messages.md").read_text()
    messages = src_messages()
    assert len(messages) > 20, messages
    missing = [m for m in messages if m not in page]
    assert not missing, f"docs/messages.md does not name: {missing}"


# ---- links, history, length ----------------------------------------------------------------

def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors."""
    out = set()
    for line in page.read_text().splitlines():
        m = re.match(r"#+\s+(.*)", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).replace("`", "").lower()).replace(" ", "-")
            out.add(slug)
    return out


def test_links_resolve() -> None:
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"\w+://", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            assert dest.exists(), f"{page.name}: link to {target}, which does not exist"
            if anchor:
                assert anchor in anchors(dest), f"{page.name}: link to {target}, no such heading"


HISTORY = re.compile(r"\bsessions? \d|\bissues? ?#?\d|\bbefore this change|\bwork periods?\b|\bthis change\b|"
                     r"\bused to\b|\bwhat changed\b", re.I)


def comment_text(path: Path) -> str:
    """The comments and docstrings of a source file (and all of a Markdown page)."""
    text = path.read_text()
    if path.suffix in (".md", ".txt"):
        return text
    if path.suffix == ".py":
        return "\n".join(re.findall(r"#.*|\"\"\"[\s\S]*?\"\"\"", text))
    return "\n".join(re.findall(r"/\*[\s\S]*?\*/|//.*|#.*", text))


def test_no_page_or_comment_tells_how_it_was_made() -> None:
    files = PAGES + [p for p in (ROOT / "bench").iterdir() if p.suffix in (".c", ".cpp", ".h", ".py", ".txt", ".sql")]
    files += [p for p in (ROOT / "python" / "frugal").glob("*.py")]
    bad = []
    for f in files:
        for m in HISTORY.finditer(comment_text(f)):
            bad.append(f"{f.relative_to(ROOT)}: …{comment_text(f)[max(0, m.start() - 40):m.end() + 40]!r}…")
    assert not bad, "\n".join(bad)


def test_readme_is_short_and_its_table_is_generated() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    inside = readme[readme.index(results_table.START) + len(results_table.START):readme.index(results_table.END)]
    assert re.match(r"\s*Measured \d{4}-\d\d-\d\d on .+ by `frugal bench", inside), inside[:200]
    assert "| workload |" in inside.replace("  ", " ") or re.search(r"\| workload\s+\|", inside)
    assert "frugal table out/lab/results.json --into README.md" in readme
