"""Shared test fixtures: where ../shared/ is, and skipping (or failing under CI) without it."""
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get('PYCAFFE_FT_SHARED', os.path.join(os.path.dirname(ROOT), 'shared'))


def shared_path(*parts):
    """Path under ../shared/; skips the test where it is absent, fails under CI=true."""
    path = os.path.join(SHARED, *parts)
    if not os.path.exists(path):
        if os.environ.get('CI', '').lower() == 'true':
            pytest.fail('../shared/ material missing under CI: %s' % path)
        pytest.skip('../shared/ is not here (a fresh clone): %s' % path)
    return path


def shared_exists(*parts):
    return os.path.exists(os.path.join(SHARED, *parts))


def shared_listing(*parts):
    """Sorted entries of a ../shared/ directory for parametrizing, or ['<missing>']."""
    path = os.path.join(SHARED, *parts)
    if not os.path.isdir(path):
        return ['<missing>']
    return sorted(os.listdir(path))
