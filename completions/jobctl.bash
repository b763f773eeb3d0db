# jobctl's bash completion: jobctl prints one candidate per line, already escaped as a bash
# word, and they are read with mapfile (no splitting, no globbing): nothing is evaluated.
_jobctl_completion() {
    COMPREPLY=()
    mapfile -t COMPREPLY < <(env COMP_WORDS="${COMP_WORDS[*]}" COMP_CWORD="$COMP_CWORD" \
        _JOBCTL_COMPLETE=complete_bash "$1")
    return 0
}

complete -o default -F _jobctl_completion jobctl

