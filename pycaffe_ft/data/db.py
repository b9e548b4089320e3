"""Key-value databases of serialized Datums: LMDB (lmdb package) and LevelDB (optional plyvel).

Readers give random access by record index in key order (``len(db)``, ``db[i]`` ->
(key, value)), so a data cursor can be a pure function of the iteration. Writers create the
database under a temporary name and rename it into place only when complete.
"""
import os
import shutil

from ..errors import DataError

__all__ = ['open_db', 'DBWriter', 'LMDBReader']


_OPEN_ENVS = {}  # realpath -> [env, readers]: lmdb allows one open environment per process


def _acquire_env(path):
    import lmdb
    real = os.path.realpath(path)
    entry = _OPEN_ENVS.get(real)
    if entry is None:
        env = lmdb.open(path, readonly=True, lock=False, readahead=False, max_readers=256,
                        subdir=os.path.isdir(path))
        entry = _OPEN_ENVS[real] = [env, 0]
    entry[1] += 1
    return real, entry[0]


def _release_env(real):
    entry = _OPEN_ENVS.get(real)
    if entry is not None:
        entry[1] -= 1
        if entry[1] <= 0:
            entry[0].close()
            del _OPEN_ENVS[real]


def _lmdb_file(path):
    return os.path.join(path, 'data.mdb') if os.path.isdir(path) else path


def check_lmdb_size(path):
    """Refuse a truncated LMDB before liblmdb maps it (reading past the end of a mapped file
    kills the process with SIGBUS): the newer of the two meta pages says how many pages the
    file must hold. Files that do not look like LMDB are left to liblmdb's own checks."""
    import struct
    filename = _lmdb_file(path)
    try:
        size = os.path.getsize(filename)
        with open(filename, 'rb') as f:
            head = f.read(160)
            if len(head) < 152 or struct.unpack_from('<I', head, 16)[0] != 0xBEEFC0DE:
                return
            page = struct.unpack_from('<I', head, 40)[0]  # the free DB's md_pad holds the page size
            metas = [head]
            if 4096 <= page <= 65536 and size >= page + 152:
                f.seek(page)
                metas.append(f.read(160))
    except OSError:
        return
    if not 4096 <= page <= 65536:
        raise DataError('LMDB "%s": the meta page gives a page size of %d: not a valid database' % (path, page))
    valid = [m for m in metas if len(m) >= 152 and struct.unpack_from('<I', m, 16)[0] == 0xBEEFC0DE]
    last_page, _ = max((struct.unpack_from('<QQ', m, 136)[::-1] for m in valid))[::-1]
    needed = (last_page + 1) * page
    if size < needed:
        raise DataError('LMDB "%s" is truncated: %s has %d bytes, its meta page says %d '
                        '(%d pages of %d)' % (path, filename, size, needed, last_page + 1, page))


class LMDBReader:
    """Read-only LMDB; keys are listed once at open."""

    def __init__(self, path):
        import lmdb
        if not os.path.exists(path):
            raise DataError('LMDB "%s" not found (relative paths are relative to the working '
                            'directory %s); build it with pycaffe-ft convert-imageset, convert-mnist '
                            'or convert-cifar' % (path, os.getcwd()))
        check_lmdb_size(path)
        try:
            self._real, self.env = _acquire_env(path)
        except lmdb.Error as e:
            raise DataError('cannot open LMDB "%s": %s' % (path, e)) from None
        self.path = path
        try:
            with self.env.begin() as txn:
                self.keys = list(txn.cursor().iternext(keys=True, values=False))
        except lmdb.Error as e:
            raise DataError('LMDB "%s": cannot list its keys (%s); pycaffe-ft check-db %s tells more'
                            % (path, e, path)) from None
        if not self.keys:
            raise DataError('LMDB "%s" is empty' % path)
        self._txn = self.env.begin(buffers=False)

    def __len__(self):
        return len(self.keys)

    def __getitem__(self, index):
        import lmdb
        key = self.keys[index]
        try:
            value = self._txn.get(key)
        except lmdb.Error as e:
            raise DataError('record %r: %s' % (key, e)) from None
        if value is None:
            raise DataError('record %r: listed but missing (a corrupt database?)' % (key,))
        return key, value

    def close(self):
        if self.env is not None:
            self._txn.abort()
            _release_env(self._real)
            self.env = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class LevelDBReader:
    def __init__(self, path):
        try:
            import plyvel
        except ImportError:
            raise DataError('"%s" is a LevelDB database: reading LevelDB needs the optional plyvel '
                            'package (pip install plyvel), or convert the data with --backend lmdb' % path) from None
        if not os.path.exists(path):
            raise DataError('LevelDB "%s" not found' % path)
        self.db = plyvel.DB(path, create_if_missing=False)
        self.keys = list(self.db.iterator(include_value=False))
        if not self.keys:
            raise DataError('LevelDB "%s" is empty' % path)
        self.path = path

    def __len__(self):
        return len(self.keys)

    def __getitem__(self, index):
        key = self.keys[index]
        return key, self.db.get(key)

    def close(self):
        self.db.close()


def open_db(path, backend='lmdb'):
    backend = backend.lower()
    if backend == 'lmdb':
        return LMDBReader(path)
    if backend == 'leveldb':
        return LevelDBReader(path)
    raise DataError('unknown database backend "%s"; known: lmdb, leveldb' % backend)


class DBWriter:
    """Write records in batches into ``path + '.partial'``; ``close()`` renames it to ``path``.
    An interrupted conversion leaves only the ``.partial`` directory, never a database that looks
    complete."""

    def __init__(self, path, backend='lmdb', map_size=1 << 40, commit_every=1000):
        if backend.lower() != 'lmdb':
            raise DataError('writing "%s": only the lmdb backend can be written here (LevelDB needs '
                            'plyvel; use --backend lmdb)' % backend)
        import lmdb
        if os.path.exists(path):
            raise DataError('database "%s" already exists; remove it first' % path)
        self.path, self.tmp = path, path + '.partial'
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.env = lmdb.open(self.tmp, map_size=map_size, subdir=True, lock=True)
        self.txn = self.env.begin(write=True)
        self.count, self.commit_every = 0, commit_every

    def put(self, key, value):
        self.txn.put(key if isinstance(key, bytes) else key.encode(), value)
        self.count += 1
        if self.count % self.commit_every == 0:
            self.txn.commit()
            self.txn = self.env.begin(write=True)

    def close(self):
        self.txn.commit()
        self.env.sync(True)
        self.env.close()
        os.replace(self.tmp, self.path)

    def abort(self):
        self.txn.abort()
        self.env.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()
