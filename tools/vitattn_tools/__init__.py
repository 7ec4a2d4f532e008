"""Helpers of the command-line tools (``tools/``, ``benchmarks/``, tests).

Kept apart from the :mod:`vitattn_mm` library, which holds only what a
config or a model needs at run time. Installed with the library (``pip
install -e .`` maps this folder to the top-level package ``vitattn_tools``)
so it imports from any working directory. Modules:

- :mod:`.runtime`: reading a config as the tools do, CPU-capable launching,
  device adaptation, the end of every distributed run;
- :mod:`.demo_config`: any config as a run on the embedded demo data;
- :mod:`.tasks`: the task of a config (from its default scope);
- :mod:`.meta`: shape-only model builds on the meta device;
- :mod:`.flops`: parameter and FLOP counting in both conventions;
- :mod:`.model_zoo`: the model-zoo and pretrained-weights tables;
- :mod:`.recipes`: the recipe table and where each value comes from;
- :mod:`.drop_in`: stock OpenMMLab configs with the backbone type changed;
- :mod:`.stock_tests`: mmseg's own backbone tests run against our classes;
- :mod:`.benchmark`: latency / memory presets and measurement;
- :mod:`.attention_maps`: where one query looks, for the figures;
- :mod:`.converter`: the command line of the checkpoint converters.

Submodules are imported on demand (each pulls in what it needs), so
``import vitattn_tools.runtime`` does not load the FLOP counter.
"""
