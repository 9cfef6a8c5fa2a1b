complete -c lifeline-agent -s c -l config -d 'The configuration file (TOML); `LIFELINE_AGENT_*` variables override it' -r -F
complete -c lifeline-agent -l completions -d 'Print a completion script for a shell and exit' -r -f -a "bash\t''
elvish\t''
fish\t''
powershell\t''
zsh\t''"
complete -c lifeline-agent -l dry-run -d 'Only say what a restart would do'
complete -c lifeline-agent -l check -d 'Check the configuration, print what it resolves to, and exit'
complete -c lifeline-agent -l man -d 'Print the manual page (roff) and exit: `lifeline-agent --man | man -l -`'
complete -c lifeline-agent -s h -l help -d 'Print help'
complete -c lifeline-agent -s V -l version -d 'Print version'
