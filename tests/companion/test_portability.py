"""What the companion may assume of the user's interpreter: any Python from 3.8
on, with nothing installed. Every module under launcher/python must parse with
Python 3.8's grammar and import only the standard library (and the companion's
own modules): it runs inside the user's process, in whatever venv or conda
environment the script uses, and never imports torch itself."""

import ast
import sys
import unittest

from companion_harness import BOOTSTRAP

OLDEST = (3, 8)


def sources():
    found = sorted(BOOTSTRAP.rglob("*.py"))
    if not found:
        raise AssertionError("no Python sources under %s" % BOOTSTRAP)
    return found


def absolute_imports(tree):
    """(line, top-level module name) of every absolute import in the module."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module.split(".")[0]


class PortabilityTest(unittest.TestCase):
    def test_every_module_parses_with_the_oldest_grammar(self):
        for path in sources():
            with self.subTest(path=path.name):
                ast.parse(path.read_text(), filename=str(path), feature_version=OLDEST)

    @unittest.skipUnless(hasattr(sys, "stdlib_module_names"), "needs Python 3.10+ to list the standard library")
    def test_every_import_is_of_the_standard_library_or_the_companion(self):
        own = {p.stem for p in sources()} | {p.name for p in BOOTSTRAP.iterdir() if p.is_dir()}
        for path in sources():
            tree = ast.parse(path.read_text(), filename=str(path))
            for line, name in absolute_imports(tree):
                with self.subTest(path=path.name, line=line):
                    self.assertTrue(name in sys.stdlib_module_names or name in own,
                                    "%s:%d imports %s, which is not in the standard library" % (path, line, name))

    def test_a_grammar_newer_than_the_oldest_is_refused(self):
        # The check above can fail: a match statement is Python 3.10's.
        with self.assertRaises(SyntaxError):
            ast.parse("match x:\n    case 1:\n        pass\n", feature_version=OLDEST)


if __name__ == "__main__":
    unittest.main()
