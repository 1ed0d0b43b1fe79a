"""mlx_lm.lora with a callback that prints each training report as a line
`REPORT {json}` (its terminal UI shows neither the peak memory nor the
iterations per second). Arguments are mlx_lm.lora's."""
import json
import sys

import mlx_lm.lora as lora
from mlx_lm.tuner.callbacks import TrainingCallback


class Report(TrainingCallback):
    def on_train_loss_report(self, info):
        print("REPORT " + json.dumps(info), flush=True)


lora.get_reporting_callbacks = lambda *args, **kwargs: Report()
sys.argv = ["mlx_lm.lora"] + sys.argv[1:]
lora.main()
