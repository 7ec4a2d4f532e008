from setuptools import find_packages, setup


def readme():
    with open('README.md', encoding='utf-8') as f:
        return f.read()


def version():
    scope = {}
    with open('vitattn_mm/version.py', encoding='utf-8') as f:
        exec(f.read(), scope)
    return scope['__version__']


setup(
    name='vitattn_mm',
    version=version(),
    description='Efficient vision-transformer attention backbones '
    '(FLatten, LaViT, L2ViT, MSF) for OpenMMLab detection, segmentation '
    'and classification',
    long_description=readme(),
    long_description_content_type='text/markdown',
    # The library, and beside it the command-line tools' helpers: a second
    # top-level package kept in tools/ (where the tools are) and installed
    # with the library, so `import vitattn_tools` works from tools/,
    # benchmarks/ and tests/ alike.
    packages=find_packages(include=('vitattn_mm', 'vitattn_mm.*')) +
    ['vitattn_tools'],
    package_dir={'vitattn_tools': 'tools/vitattn_tools'},
    python_requires='>=3.9',
    install_requires=[
        'torch>=2.0',
        'mmengine>=0.10.0,<0.11',
        'mmcv>=2.0.0,<2.2.0',
        'mmdet>=3.0.0,<3.4',
        'mmsegmentation>=1.0.0,<1.3',
        'mmpretrain>=1.0.0,<1.3',
        'ftfy',
        'regex',
        'pycocotools',
    ],
    license='Apache License 2.0',
    zip_safe=False,
)
