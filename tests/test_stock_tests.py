"""mmseg's own ``test_swin.py`` and ``test_vit.py`` (from the mmsegmentation
1.2.2 sdist that tools/setup_env.sh fetches), run unchanged against every
project class of the architecture with only the class substituted
(:mod:`vitattn_tools.stock_tests`).

Every outcome is held to the documented one (docs/plugging_in.md): a fix
or a regression changes the table and fails here.
"""
import pytest

from vitattn_tools.stock_tests import (KNOWN_FAILURES, STOCK_TEST_FILES,
                                       classes_for, run_file)

#: (file, class) -> {function: status}; every 'failed' has its reason in
#: KNOWN_FAILURES.
EXPECTED = {
    ('test_swin.py', name): dict(test_swin_block='n/a',
                                 test_swin_transformer='passed')
    for name in ('AttnSwinTransformer', 'FLattenSwinTransformer',
                 'LessAttnSwinTransformer', 'MSFSwinTransformer')
}
EXPECTED.update({
    ('test_vit.py', name): dict(
        test_vit_backbone='passed' if name == 'AttnViT' else 'failed',
        test_vit_init='passed')
    for name in ('AttnViT', 'FLattenDeiT', 'LessAttnViT', 'MSFViT')
})


def _cases():
    return [(f, cls) for f, stock in STOCK_TEST_FILES.items()
            for cls in classes_for(stock)]


def test_every_class_of_the_architecture_is_in_the_table():
    assert sorted((f, cls.__name__) for f, cls in _cases()) == \
        sorted(EXPECTED)


@pytest.mark.slow
@pytest.mark.parametrize('filename,cls', _cases(),
                         ids=lambda v: getattr(v, '__name__', v))
def test_mmseg_backbone_tests_unchanged(filename, cls):
    outcomes = run_file(filename, cls)
    got = {o.function: o.status for o in outcomes}
    details = {o.function: o.detail for o in outcomes if o.detail}
    assert got == EXPECTED[filename, cls.__name__], details
    for function, status in got.items():
        if status == 'failed':
            key = (filename, function, cls.__name__)
            assert key in KNOWN_FAILURES, details


@pytest.mark.slow
@pytest.mark.parametrize('name', ['FLattenDeiT', 'LessAttnViT', 'MSFViT'])
def test_vit_families_at_vit_b(name):
    """The reasons given above, checked: at mmseg's default size (ViT-B)
    MSF-ViT passes mmseg's ViT test, and the two families whose attention
    works on the token grid fail only where it asks for a class token."""
    cls = next(c for c in classes_for('VisionTransformer')
               if c.__name__ == name)
    at_base = type(name, (cls, ), {})
    at_base.__init__ = lambda self, arch='b', **kw: cls.__init__(
        self, arch=arch, **kw)
    outcomes = {o.function: o for o in run_file('test_vit.py', at_base)}
    assert outcomes['test_vit_init'].status == 'passed'
    backbone = outcomes['test_vit_backbone']
    if name == 'MSFViT':
        assert backbone.status == 'passed', backbone
    else:
        assert backbone.status == 'failed'
        assert 'line 117' in backbone.detail and \
            'class token' in backbone.detail, backbone
