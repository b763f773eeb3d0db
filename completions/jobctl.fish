# jobctl's fish completion: jobctl prints one candidate per line (a tab, then its
# description); fish quotes each as it inserts it. No files unless jobctl lists them.
complete --command jobctl --no-files --arguments \
    "(env _JOBCTL_COMPLETE=complete_fish _TYPER_COMPLETE_FISH_ACTION=get-args \
    _TYPER_COMPLETE_ARGS=(commandline -cp) jobctl)"

