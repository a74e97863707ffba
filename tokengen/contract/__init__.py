"""What every part of the project agrees on, torch-free: the trial spec, the result record, the
names that cross a process or a store, the variants, the models' facts, and the rules of which
trials can run. The planner (sweeps/) and the reports (tracking/) import nothing else from tokengen."""
