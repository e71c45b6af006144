"""Running: the config schema (`config`), the YAML file and command line (`argv`), the checks before a model loads
(`validation`), the sampling budget (`budget`), one run (`train`), run.json (`record`), several methods on one
budget (`compare`), console progress (`progress`) and the `passk` command (`cli`, `entry`)."""
