"""qmm.comfy — qmm behind ComfyUI's own interfaces, beside qmm.kitchen (the comfy-kitchen
backend, which runs ComfyUI's INT8 layers). Needs torch, not ComfyUI: what is ComfyUI's is looked
up at call time, so it is tested without ComfyUI.

  qmm.comfy.attention   qmm.attention in ComfyUI's attention signature and as the
                        transformer_options attention override (attention, make_attention,
                        override, chain, apply, declines); what the ComfyUI node (comfyui/)
                        registers.

Importing qmm.comfy imports nothing else (no torch); import the module you use.
"""
