#compdef lifeline-agent

autoload -U is-at-least

_lifeline-agent() {
    typeset -A opt_args
    typeset -a _arguments_options
    local ret=1

    if is-at-least 5.2; then
        _arguments_options=(-s -S -C)
    else
        _arguments_options=(-s -C)
    fi

    local context curcontext="$curcontext" state line
    _arguments "${_arguments_options[@]}" : \
'-c+[The configuration file (TOML); \`LIFELINE_AGENT_*\` variables override it]:CONFIG:_files' \
'--config=[The configuration file (TOML); \`LIFELINE_AGENT_*\` variables override it]:CONFIG:_files' \
'--completions=[Print a completion script for a shell and exit]:SHELL:(bash elvish fish powershell zsh)' \
'--dry-run[Only say what a restart would do]' \
'--check[Check the configuration, print what it resolves to, and exit]' \
'--man[Print the manual page (roff) and exit\: \`lifeline-agent --man | man -l -\`]' \
'-h[Print help]' \
'--help[Print help]' \
'-V[Print version]' \
'--version[Print version]' \
&& ret=0
}

(( $+functions[_lifeline-agent_commands] )) ||
_lifeline-agent_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline-agent commands' commands "$@"
}

if [ "$funcstack[1]" = "_lifeline-agent" ]; then
    _lifeline-agent "$@"
else
    compdef _lifeline-agent lifeline-agent
fi
