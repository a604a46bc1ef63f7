"""Predict the device: a virtual-time replay of recorded events under a DAV_3510 cost model.

- `cost_model`: `CostModel`, the cited DAV_3510 / Ascend 950PR parameters and the stated assumptions;
- `records`: `PredictRecorder`, the observer whose records the replay reads, and the gather across ranks;
- `replay`: `replay(records, model) -> Prediction` (kernel time, critical path, hidden / exposed
  communication, per-core utilisation).
"""

from mc2emu.predict.cost_model import DEFAULT_COST_MODEL, CostModel
from mc2emu.predict.records import PredictRecorder, gather_records
from mc2emu.predict.replay import Prediction, ReplayError, replay

__all__ = [
           "DEFAULT_COST_MODEL",
           "CostModel",
           "PredictRecorder",
           "Prediction",
           "ReplayError",
           "gather_records",
           "replay",
]
