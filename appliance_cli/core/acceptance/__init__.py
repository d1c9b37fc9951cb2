"""`appliance acceptance`: a smoke job (one GPU, one fraction of a GPU) and NetApp TR-4858's
scheduling scenarios (4.8 over-quota, 4.9 fairness by preemption, 4.10 over-quota fairness) run
on the site's scheduler stack, the GPUs each project gets compared with the seed's tables.

model (the data types) · tr4858 (the seed's jobs and tables) · smoke (the smoke jobs and their
check) · plan (what applies to a site) · compare (pods -> GPUs per project; the verdict) ·
manifests (Job objects per stack) · runner (the run, against a Cluster port) · kube (that port
over kubectl on the master) · junit (the report)."""
