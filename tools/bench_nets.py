"""The nets of the training-speed benchmark, written with ``caffe.NetSpec`` after BVLC Caffe's
definitions (LeNet, CIFAR10-quick, AlexNet, CaffeNet, GoogLeNet without its auxiliary heads)
plus ResNet-18/50 in the Caffe style (Convolution, BatchNorm, Scale, Eltwise).

``build(name, batch, deploy=False)`` -> (NetParameter, solver settings). Train nets read data
and labels from Input layers and end in SoftmaxWithLoss; deploy nets end in Softmax.
"""
import pycaffe_ft as caffe
from pycaffe_ft import layers as L
from pycaffe_ft import params as P

__all__ = ['NETS', 'build']

W1, B2 = dict(lr_mult=1, decay_mult=1), dict(lr_mult=2, decay_mult=0)


def _conv(bottom, nout, k, stride=1, pad=0, group=1, std=0.01, bias=0.0, bias_term=True, xavier=False):
    filler = dict(type='xavier') if xavier else dict(type='gaussian', std=std)
    if not bias_term:
        return L.Convolution(bottom, num_output=nout, kernel_size=k, stride=stride, pad=pad, group=group,
                             bias_term=False, weight_filler=filler, param=[W1])
    return L.Convolution(bottom, num_output=nout, kernel_size=k, stride=stride, pad=pad, group=group,
                         weight_filler=filler, bias_filler=dict(type='constant', value=bias), param=[W1, B2])


def _ip(bottom, nout, std=0.005, bias=0.0, xavier=False):
    filler = dict(type='xavier') if xavier else dict(type='gaussian', std=std)
    return L.InnerProduct(bottom, num_output=nout, weight_filler=filler,
                          bias_filler=dict(type='constant', value=bias), param=[W1, B2])


def _max(bottom, k, s, pad=0):
    return L.Pooling(bottom, pool=P.Pooling.MAX, kernel_size=k, stride=s, pad=pad)


def _ave(bottom, k, s, pad=0):
    return L.Pooling(bottom, pool=P.Pooling.AVE, kernel_size=k, stride=s, pad=pad)


def _relu(bottom):
    return L.ReLU(bottom, in_place=True)


def _lrn(bottom, size=5, alpha=1e-4, beta=0.75):
    return L.LRN(bottom, local_size=size, alpha=alpha, beta=beta)


def lenet(n):
    n.conv1 = _conv(n.data, 20, 5, xavier=True)
    n.pool1 = _max(n.conv1, 2, 2)
    n.conv2 = _conv(n.pool1, 50, 5, xavier=True)
    n.pool2 = _max(n.conv2, 2, 2)
    n.ip1 = _ip(n.pool2, 500, xavier=True)
    n.relu1 = _relu(n.ip1)
    return _ip(n.relu1, 10, xavier=True)


def cifar10_quick(n):
    n.conv1 = _conv(n.data, 32, 5, pad=2, std=0.0001)
    n.pool1 = _max(n.conv1, 3, 2)
    n.relu1 = _relu(n.pool1)
    n.conv2 = _conv(n.relu1, 32, 5, pad=2)
    n.relu2 = _relu(n.conv2)
    n.pool2 = _ave(n.relu2, 3, 2)
    n.conv3 = _conv(n.pool2, 64, 5, pad=2)
    n.relu3 = _relu(n.conv3)
    n.pool3 = _ave(n.relu3, 3, 2)
    n.ip1 = _ip(n.pool3, 64, std=0.1)
    return _ip(n.ip1, 10, std=0.1)


def _alexnet(n, pool_first):
    top = n.data
    for i, (nout, k, s, pad, group, bias) in enumerate([(96, 11, 4, 0, 1, 0.0), (256, 5, 1, 2, 2, 0.1)], 1):
        conv = _conv(top, nout, k, stride=s, pad=pad, group=group, bias=bias)
        setattr(n, 'conv%d' % i, conv)
        setattr(n, 'relu%d' % i, _relu(conv))
        if pool_first:
            setattr(n, 'pool%d' % i, _max(conv, 3, 2))
            top = _lrn(getattr(n, 'pool%d' % i))
            setattr(n, 'norm%d' % i, top)
        else:
            setattr(n, 'norm%d' % i, _lrn(conv))
            top = _max(getattr(n, 'norm%d' % i), 3, 2)
            setattr(n, 'pool%d' % i, top)
    n.conv3 = _conv(top, 384, 3, pad=1)
    n.relu3 = _relu(n.conv3)
    n.conv4 = _conv(n.conv3, 384, 3, pad=1, group=2, bias=0.1)
    n.relu4 = _relu(n.conv4)
    n.conv5 = _conv(n.conv4, 256, 3, pad=1, group=2, bias=0.1)
    n.relu5 = _relu(n.conv5)
    n.pool5 = _max(n.conv5, 3, 2)
    n.fc6 = _ip(n.pool5, 4096, bias=0.1)
    n.relu6 = _relu(n.fc6)
    n.drop6 = L.Dropout(n.fc6, in_place=True, dropout_ratio=0.5)
    n.fc7 = _ip(n.fc6, 4096, bias=0.1)
    n.relu7 = _relu(n.fc7)
    n.drop7 = L.Dropout(n.fc7, in_place=True, dropout_ratio=0.5)
    return _ip(n.fc7, 1000, std=0.01)


def alexnet(n):
    return _alexnet(n, pool_first=False)


def caffenet(n):
    return _alexnet(n, pool_first=True)


def _inception(n, name, bottom, c1, c3r, c3, c5r, c5, pp):
    def cr(tag, b, nout, k, pad=0):
        conv = _conv(b, nout, k, pad=pad, xavier=True, bias=0.2)
        setattr(n, '%s/%s' % (name, tag), conv)
        setattr(n, '%s/relu_%s' % (name, tag), _relu(conv))
        return conv
    b1 = cr('1x1', bottom, c1, 1)
    b3 = cr('3x3', cr('3x3_reduce', bottom, c3r, 1), c3, 3, pad=1)
    b5 = cr('5x5', cr('5x5_reduce', bottom, c5r, 1), c5, 5, pad=2)
    pool = _max(bottom, 3, 1, pad=1)
    setattr(n, '%s/pool' % name, pool)
    bp = cr('pool_proj', pool, pp, 1)
    out = L.Concat(b1, b3, b5, bp)
    setattr(n, '%s/output' % name, out)
    return out


def googlenet(n):
    """BVLC GoogLeNet (models/bvlc_googlenet) without the two auxiliary classifiers."""
    n['conv1/7x7_s2'] = _conv(n.data, 64, 7, stride=2, pad=3, xavier=True, bias=0.2)
    n['conv1/relu_7x7'] = _relu(n['conv1/7x7_s2'])
    n['pool1/3x3_s2'] = _max(n['conv1/7x7_s2'], 3, 2)
    n['pool1/norm1'] = _lrn(n['pool1/3x3_s2'])
    n['conv2/3x3_reduce'] = _conv(n['pool1/norm1'], 64, 1, xavier=True, bias=0.2)
    n['conv2/relu_3x3_reduce'] = _relu(n['conv2/3x3_reduce'])
    n['conv2/3x3'] = _conv(n['conv2/3x3_reduce'], 192, 3, pad=1, xavier=True, bias=0.2)
    n['conv2/relu_3x3'] = _relu(n['conv2/3x3'])
    n['conv2/norm2'] = _lrn(n['conv2/3x3'])
    top = n['pool2/3x3_s2'] = _max(n['conv2/norm2'], 3, 2)
    for name, cfg in [('inception_3a', (64, 96, 128, 16, 32, 32)), ('inception_3b', (128, 128, 192, 32, 96, 64))]:
        top = _inception(n, name, top, *cfg)
    top = n['pool3/3x3_s2'] = _max(top, 3, 2)
    for name, cfg in [('inception_4a', (192, 96, 208, 16, 48, 64)), ('inception_4b', (160, 112, 224, 24, 64, 64)),
                      ('inception_4c', (128, 128, 256, 24, 64, 64)), ('inception_4d', (112, 144, 288, 32, 64, 64)),
                      ('inception_4e', (256, 160, 320, 32, 128, 128))]:
        top = _inception(n, name, top, *cfg)
    top = n['pool4/3x3_s2'] = _max(top, 3, 2)
    for name, cfg in [('inception_5a', (256, 160, 320, 32, 128, 128)), ('inception_5b', (384, 192, 384, 48, 128, 128))]:
        top = _inception(n, name, top, *cfg)
    n['pool5/7x7_s1'] = L.Pooling(top, pool=P.Pooling.AVE, kernel_size=7, stride=1)
    n['pool5/drop_7x7_s1'] = L.Dropout(n['pool5/7x7_s1'], in_place=True, dropout_ratio=0.4)
    return _ip(n['pool5/7x7_s1'], 1000, xavier=True)


def _bn_scale(n, name, bottom, relu):
    n['bn_' + name] = L.BatchNorm(bottom, in_place=True)
    n['scale_' + name] = L.Scale(bottom, in_place=True, bias_term=True)
    if relu:
        n['relu_' + name] = _relu(bottom)
    return bottom


def _conv_bn(n, name, bottom, nout, k, stride=1, pad=0, relu=True):
    conv = n[name] = _conv(bottom, nout, k, stride=stride, pad=pad, bias_term=False, xavier=True)
    return _bn_scale(n, name, conv, relu)


def _resnet(n, blocks, bottleneck):
    top = _conv_bn(n, 'conv1', n.data, 64, 7, stride=2, pad=3)
    top = n.pool1 = _max(top, 3, 2)
    width, index = 64, 0
    for stage, count in enumerate(blocks):
        for b in range(count):
            index += 1
            name = 'res%d%s' % (stage + 2, chr(ord('a') + b))
            stride = 2 if stage > 0 and b == 0 else 1
            out = width * (4 if bottleneck else 1)
            if b == 0:
                shortcut = _conv_bn(n, name + '_branch1', top, out, 1, stride=stride, relu=False)
            else:
                shortcut = top
            if bottleneck:
                x = _conv_bn(n, name + '_branch2a', top, width, 1, stride=stride)
                x = _conv_bn(n, name + '_branch2b', x, width, 3, pad=1)
                x = _conv_bn(n, name + '_branch2c', x, out, 1, relu=False)
            else:
                x = _conv_bn(n, name + '_branch2a', top, width, 3, stride=stride, pad=1)
                x = _conv_bn(n, name + '_branch2b', x, width, 3, pad=1, relu=False)
            top = n[name] = L.Eltwise(shortcut, x)
            n[name + '_relu'] = _relu(top)
        width *= 2
    n.pool5 = L.Pooling(top, pool=P.Pooling.AVE, global_pooling=True)
    return _ip(n.pool5, 1000, xavier=True)


def resnet18(n):
    return _resnet(n, (2, 2, 2, 2), bottleneck=False)


def resnet50(n):
    return _resnet(n, (3, 4, 6, 3), bottleneck=True)


# name -> (builder, input (C, H, W), classes, solver settings as in the BVLC solvers)
NETS = {
    'lenet': (lenet, (1, 28, 28), 10, dict(base_lr=0.01, momentum=0.9, weight_decay=0.0005)),
    'cifar10_quick': (cifar10_quick, (3, 32, 32), 10, dict(base_lr=0.001, momentum=0.9, weight_decay=0.004)),
    'alexnet': (alexnet, (3, 227, 227), 1000, dict(base_lr=0.01, momentum=0.9, weight_decay=0.0005)),
    'caffenet': (caffenet, (3, 227, 227), 1000, dict(base_lr=0.01, momentum=0.9, weight_decay=0.0005)),
    'googlenet': (googlenet, (3, 224, 224), 1000, dict(base_lr=0.01, momentum=0.9, weight_decay=0.0002)),
    'resnet18': (resnet18, (3, 224, 224), 1000, dict(base_lr=0.1, momentum=0.9, weight_decay=0.0001)),
    'resnet50': (resnet50, (3, 224, 224), 1000, dict(base_lr=0.1, momentum=0.9, weight_decay=0.0001)),
}


def build(name, batch, deploy=False):
    """(NetParameter, solver settings) of net ``name`` at ``batch``."""
    builder, (c, h, w), classes, solver = NETS[name]
    n = caffe.NetSpec()
    n.data = L.Input(shape=dict(dim=[batch, c, h, w]))
    if not deploy:
        n.label = L.Input(shape=dict(dim=[batch]))
    logits = builder(n)
    if deploy:
        n.prob = L.Softmax(logits)
    else:
        n.loss = L.SoftmaxWithLoss(logits, n.label)
    proto = n.to_proto()
    proto.name = name
    return proto, dict(solver, classes=classes)
