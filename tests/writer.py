"""A writer process for the concurrency tests: ``python writer.py GROUP EXPERIMENT WORKER N``."""

import sys

import mlflow_perfgate as pg

CONDITIONS = {"model": "TinyLM", "input_shape": "(2, 16)", "batch_size": 2, "dtype": "fp32", "device": "cpu",
              "repeats": 3, "measurement_method": "m", "checkpoint": False}

if __name__ == "__main__":
    group, experiment, worker, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    for index in range(count):
        arm = ("baseline", "candidate")[(worker + index) % 2]
        conditions = {**CONDITIONS, "checkpoint": arm == "candidate"}
        pg.log_attempt(group, arm, conditions, latency_ms=100 - 10 * (arm == "candidate") + index,
                       quality=0.9, experiment_name=experiment, attempt_id=f"w{worker}-{index}")
