"""What the contract knows of the machine a trial runs on: the environment a trial process gets
(process_env), where a result was measured (fingerprint), and what each GPU type can do (gpus)."""
