"""``pycaffe-ft check-db``: read every record of an LMDB in a child process and report the first
one that cannot be read.

A corrupt page can make liblmdb abort the process that reads it (an assertion inside the C
library: no Python exception can catch it), so the walk runs in a child: a crash there is
reported with the last record read before it, and the caller lives on. A truncated file is
caught before anything is mapped (see :func:`pycaffe_ft.data.db.check_lmdb_size`).
"""
import json
import os
import signal
import subprocess
import sys

from ..errors import DataError

__all__ = ['check_db']


def _walk(path, out):
    """In the child: ``ok KEY`` on ``out`` for each record read and decoded; ``bad`` with the key
    (when the cursor got that far) and the message for the first one that cannot be."""
    import lmdb

    from .datum import datum_to_array, parse_datum
    env = lmdb.open(path, readonly=True, lock=False, subdir=os.path.isdir(path), max_readers=1)
    key = None
    try:
        with env.begin(buffers=False) as txn:
            for key, value in txn.cursor():
                datum_to_array(parse_datum(value, key), key)
                out.write('ok %s\n' % key.hex())
                out.flush()
                key = None
    except (DataError, lmdb.Error) as e:
        out.write('bad %s\n' % json.dumps({'key': key.hex() if key else None, 'error': str(e)}))
        return 1
    finally:
        env.close()
    return 0


def check_db(path, timeout=None):
    """Walk the LMDB at ``path`` in a child process. Returns a report: ``status`` 'ok', 'bad
    record' or 'crashed', ``records`` (read without error), and for failures ``key`` (hex),
    ``index`` and ``message``. Raises DataError when the database cannot even be opened."""
    from .db import check_lmdb_size
    if not os.path.exists(path):
        raise DataError('LMDB "%s" not found' % path)
    check_lmdb_size(path)
    proc = subprocess.Popen([sys.executable, '-m', 'pycaffe_ft.data.check_db', path], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return _report(out, 'crashed', 'no progress for %s s: the reader hangs' % timeout)
    if proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name
        detail = err.strip().splitlines()[-1] if err.strip() else ''
        return _report(out, 'crashed', 'liblmdb killed the reader with %s%s: a corrupt page' % (
            name, ' (%s)' % detail if detail else ''))
    for line in out.splitlines():
        if line.startswith('bad '):
            bad = json.loads(line[4:])
            report = _report(out, 'bad record', bad['error'])
            report['key'] = bad['key']
            return report
    if proc.returncode != 0:
        return _report(out, 'crashed', err.strip().splitlines()[-1] if err.strip() else 'exit %d' % proc.returncode)
    return _report(out, 'ok', None)


def _report(out, status, message):
    good = [line.split()[1] for line in out.splitlines() if line.startswith('ok ')]
    return {'status': status, 'records': len(good), 'message': message, 'key': None,
            'index': len(good),  # the record after the last one read
            'last_good_key': good[-1] if good else None}


def describe(path, report):
    """Lines for the user."""
    if report['status'] == 'ok':
        return ['%s: %d records, all readable' % (path, report['records'])]
    where = 'record %d' % report['index']
    if report.get('key'):
        where += ' (key %r)' % bytes.fromhex(report['key']).decode('utf-8', 'replace')
    elif report['last_good_key']:
        where += ' (after key %r)' % bytes.fromhex(report['last_good_key']).decode('utf-8', 'replace')
    return ['%s: %s at %s: %s' % (path, report['status'], where, report['message']),
            '%d records before it were read without error; training on this database would stop '
            '(or crash) there' % report['records']]


if __name__ == '__main__':
    sys.exit(_walk(sys.argv[1], sys.stdout))
