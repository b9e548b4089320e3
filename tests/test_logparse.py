"""parse-log reads only Caffe log lines: a log captured from a terminal (progress lines, erase
sequences, carriage returns), mpiexec's output tags and stray text parse as the clean log does."""
from pycaffe_ft.logparse import caffe_line, parse_log

CLEAN = '''I1130 10:00:00.000001  11 solver.py:117] Creating training net from net.prototxt
I1130 10:00:01.000000  11 solver.py:300] Iteration 0, Testing net (#0)
I1130 10:00:01.500000  11 solver.py:320]     Test net output #0: accuracy = 0.1
I1130 10:00:02.000000  11 solver.py:219] Iteration 0 (0 iter/s, 0s/100 iters), loss = 2.3
I1130 10:00:02.000000  11 solver.py:230]     Train net output #0: loss = 2.3 (* 1 = 2.3 loss)
I1130 10:00:02.000000  11 solver.py:235] Iteration 0, lr = 0.01
I1130 10:00:09.000000  11 solver.py:219] Iteration 100 (14 iter/s, 7s/100 iters), loss = 0.3
I1130 10:00:09.000000  11 solver.py:230]     Train net output #0: loss = 0.25 (* 1 = 0.25 loss)
I1130 10:00:09.000000  11 solver.py:235] Iteration 100, lr = 0.0099
'''


def dirty(clean):
    """The same log as a terminal recording would hold it."""
    out = ['Iteration 999 from a stray print, lr = 5\n', '[700/10000]garbage 0230 10:00:00.0 x\n']
    for i, line in enumerate(clean.splitlines(True)):
        if i % 3 == 0:
            line = '\r\x1b[K[%d/200  3.0%%]  5.0 iter/s  ETA 0:30  loss 0.3\r\x1b[K' % i + line
        elif i % 3 == 1:
            line = '[1,0]<stderr>:' + line
        else:
            line = '[700/10000]' + line
        out.append(line)
    out.append('\r\x1b[K[200/200 100.0%]  5.0 iter/s  ETA 0:00  loss 0.3\r\x1b[K')
    out.append('W0230 10:00:00.000000  11 x.py:1] Iteration 5 on a day that does not exist\n')
    return ''.join(out)


def test_a_terminal_recording_parses_like_the_clean_log(tmp_path):
    (tmp_path / 'clean.log').write_text(CLEAN)
    (tmp_path / 'dirty.log').write_text(dirty(CLEAN))
    clean = parse_log(str(tmp_path / 'clean.log'))
    train, test = parse_log(str(tmp_path / 'dirty.log'))
    assert clean[0] and clean[1]
    assert repr((train, test)) == repr(clean)  # repr: NaN learning rates compare equal


def test_only_glog_lines_count():
    assert caffe_line('Iteration 5, lr = 1\n') is None
    assert caffe_line('\r\x1b[K[1/2]\r\x1b[K') is None
    assert caffe_line('[1,3]<stderr>:I1130 10:00:00.000001  11 a.py:1] hi\n') == 'I1130 10:00:00.000001  11 a.py:1] hi'


def test_a_serial_log_has_no_recovery_timeline(tmp_path):
    import pytest
    from pycaffe_ft.errors import CaffeError
    from pycaffe_ft.logparse import parse_recovery, plot_timeline
    (tmp_path / 'clean.log').write_text(CLEAN)
    assert parse_recovery(str(tmp_path / 'clean.log')) == {
        'ranks': None, 'iterations': [(8.999999, 100, 0.07)], 'failures': []}
    with pytest.raises(CaffeError, match='not the log of a parallel run'):
        plot_timeline(str(tmp_path / 'clean.log'), str(tmp_path / 't.png'))
