"""The README's pycaffe snippet runs as written."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_readme_python_snippet_runs(monkeypatch, capsys):
    with open(os.path.join(ROOT, 'README.md')) as f:
        text = f.read()
    snippets = re.findall(r'```python\n(.*?)```', text, re.S)
    assert snippets
    monkeypatch.chdir(ROOT)
    for code in snippets:
        exec(compile(code, 'README.md', 'exec'), {})
    assert '(64, 10)' in capsys.readouterr().out
