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


def _section(text, title):
    start = text.index('\n## %s\n' % title)
    end = text.find('\n## ', start + 1)
    return text[start:end if end > 0 else None]


def test_every_train_flag_the_cluster_and_thread_sections_name_exists(capsys):
    """The sections a user follows on a cluster or a shared machine name only real flags."""
    import pytest
    from pycaffe_ft import cli
    with open(os.path.join(ROOT, 'README.md')) as f:
        text = f.read()
    with pytest.raises(SystemExit):
        cli.main(['train', '--help'])
    train_help = capsys.readouterr().out
    named = set()
    for title in ('Several machines', 'Speed and threads'):
        for line in _section(text, title).splitlines():
            if 'pycaffe-ft train' in line:
                line = line.split('pycaffe-ft train', 1)[1]
            elif not line.startswith(('How many', '- The network')):
                continue
            named |= set(re.findall(r'(--[a-z][a-z-]+)', line))
    assert {'--hostfile', '--host', '--net-if', '--threads', '--np'} <= named
    assert all(flag in train_help for flag in named), sorted(f for f in named if f not in train_help)
