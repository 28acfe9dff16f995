"""One run, by job: resume (new | resume | extend | finished, from the records alone), data,
context size, plan, the loop, its observers, signals, environment facts. The orchestration
that puts them together is ``icrl.run.experiment.Experiment``."""
