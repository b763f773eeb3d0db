# jobctl's bash completion: jobctl prints one candidate per line, already escaped as a bash
# word, and they are read with mapfile (no splitting, no globbing): nothing is evaluated.
# Nothing applies (no candidate): nothing is offered, never the files of the directory (no
# -o default); a PATH option's files come from jobctl itself. A folder keeps the cursor on it.
_jobctl_completion() {
    COMPREPLY=()
    mapfile -t COMPREPLY < <(env COMP_WORDS="${COMP_WORDS[*]}" COMP_CWORD="$COMP_CWORD" \
        _JOBCTL_COMPLETE=complete_bash "$1")
    if [[ ${#COMPREPLY[@]} -eq 1 && -z ${COMPREPLY[0]} ]]; then
        COMPREPLY=()
    elif [[ ${#COMPREPLY[@]} -eq 1 && ${COMPREPLY[0]} == */ ]]; then
        compopt -o nospace 2>/dev/null
    fi
    return 0
}

complete -F _jobctl_completion jobctl

