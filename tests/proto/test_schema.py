"""proto/caffe.proto (as compiled into caffe_pb2) agrees with Caffe's wire-format facts table."""
import json

import pytest
from google.protobuf import descriptor

from pycaffe_ft.proto import caffe_pb2
from tests.helpers import shared_path

_TYPES = {
    descriptor.FieldDescriptor.TYPE_DOUBLE: 'double', descriptor.FieldDescriptor.TYPE_FLOAT: 'float',
    descriptor.FieldDescriptor.TYPE_INT64: 'int64', descriptor.FieldDescriptor.TYPE_UINT64: 'uint64',
    descriptor.FieldDescriptor.TYPE_INT32: 'int32', descriptor.FieldDescriptor.TYPE_UINT32: 'uint32',
    descriptor.FieldDescriptor.TYPE_BOOL: 'bool', descriptor.FieldDescriptor.TYPE_STRING: 'string',
    descriptor.FieldDescriptor.TYPE_BYTES: 'bytes', descriptor.FieldDescriptor.TYPE_ENUM: 'enum',
    descriptor.FieldDescriptor.TYPE_MESSAGE: 'message',
}


# pycaffe-ft's own fields, documented in proto/caffe.proto: numbered far above Caffe's so that
# Caffe's files read and write unchanged. Nothing else may differ from Caffe's table.
PROJECT_FIELDS = {'SolverParameter': {'lars_eta': 10001}, 'SolverState': {'virtual_workers': 10001}}
FIRST_PROJECT_NUMBER = 10001


@pytest.fixture(scope='module')
def facts():
    with open(shared_path('caffe_format', 'caffe_fields.json')) as f:
        return json.load(f)


def _label(field):
    if field.is_repeated:
        return 'repeated'
    return 'required' if field.is_required else 'optional'


def _qualified(desc):
    return desc.full_name[len('caffe.'):]


def test_same_messages(facts):
    assert set(caffe_pb2.DESCRIPTOR.message_types_by_name) == set(facts['messages'])


def test_every_field_agrees(facts):
    problems = []
    for name, fields in facts['messages'].items():
        msg = caffe_pb2.DESCRIPTOR.message_types_by_name[name]
        project = PROJECT_FIELDS.get(name, {})
        ours = {f.name: f for f in msg.fields if f.name not in project}
        if set(ours) != {f['name'] for f in fields}:
            problems.append('%s: fields %s vs %s' % (name, sorted(ours), sorted(f['name'] for f in fields)))
            continue
        for fact in fields:
            f = ours[fact['name']]
            where = '%s.%s' % (name, f.name)
            if f.number != fact['number']:
                problems.append('%s number %d != %d' % (where, f.number, fact['number']))
            if _label(f) != fact['label']:
                problems.append('%s label %s != %s' % (where, _label(f), fact['label']))
            if _TYPES[f.type] != fact['type']:
                problems.append('%s type %s != %s' % (where, _TYPES[f.type], fact['type']))
            if fact['type'] == 'message' and _qualified(f.message_type) != fact['message_type']:
                problems.append('%s message type %s' % (where, f.message_type.full_name))
            if fact['type'] == 'enum' and _qualified(f.enum_type) != fact['enum_type']:
                problems.append('%s enum type %s' % (where, f.enum_type.full_name))
            packed = bool(fact.get('packed', False))
            ours_packed = f.is_packed if hasattr(f, 'is_packed') else f.GetOptions().packed
            if bool(ours_packed) != packed:
                problems.append('%s packed %s != %s' % (where, ours_packed, packed))
            default = fact.get('default')
            if default is not None:
                if not f.has_default_value:
                    problems.append('%s has no declared default (expected %r)' % (where, default))
                    continue
                value = f.default_value
                if fact['type'] == 'enum':
                    value = f.enum_type.values_by_number[value].name
                if fact['type'] == 'float':
                    ok = abs(value - default) <= 1e-7 * max(1.0, abs(default))
                else:
                    ok = value == default
                if not ok:
                    problems.append('%s default %r != %r' % (where, value, default))
            elif f.has_default_value:
                problems.append('%s declares a default %r the facts do not' % (where, f.default_value))
    assert not problems, '\n'.join(problems)


def test_project_fields_stay_out_of_caffes_numbers(facts):
    for name, fields in PROJECT_FIELDS.items():
        msg = caffe_pb2.DESCRIPTOR.message_types_by_name[name]
        caffe_numbers = {f['number'] for f in facts['messages'][name]}
        for field, number in fields.items():
            assert msg.fields_by_name[field].number == number >= FIRST_PROJECT_NUMBER
            assert number not in caffe_numbers
    # a Caffe solver file round-trips to the same bytes: the project field is never written unset
    p = caffe_pb2.SolverParameter(base_lr=0.01, momentum=0.9)
    assert caffe_pb2.SolverParameter.FromString(p.SerializeToString()).SerializeToString() == p.SerializeToString()
    assert not p.HasField('lars_eta')


def test_every_enum_agrees(facts):
    problems = []
    ours = {}
    for e in caffe_pb2.DESCRIPTOR.enum_types_by_name.values():
        ours[_qualified(e)] = e
    for m in caffe_pb2.DESCRIPTOR.message_types_by_name.values():
        for e in m.enum_types:
            ours[_qualified(e)] = e
    assert set(ours) == set(facts['enums'])
    for name, values in facts['enums'].items():
        got = [(v.name, v.number) for v in ours[name].values]
        want = [(v['name'], v['number']) for v in values]
        if got != want:
            problems.append('%s: %s != %s' % (name, got, want))
    assert not problems, '\n'.join(problems)


def test_wire_round_trip_of_known_bytes():
    blob = caffe_pb2.BlobProto()
    blob.shape.dim.extend([2, 3])
    blob.data.extend([1.0, 2.0])
    # field 5 packed floats, then field 7 (shape) holding packed dims, in field-number order
    assert blob.SerializeToString() == bytes([0x2a, 0x08, 0, 0, 0x80, 0x3f, 0, 0, 0, 0x40,
                                              0x3a, 0x04, 0x0a, 0x02, 0x02, 0x03])
