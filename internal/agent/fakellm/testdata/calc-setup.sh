# The repository of the fix.json demonstration: calc/, whose test fails.
rm -rf calc && mkdir calc && cd calc && git init -q &&
printf 'add() {\n\techo $(($1 - $2))\n}\n' > calc.sh &&
printf 'cd "$(dirname "$0")" && . ./calc.sh\ngot=$(add 2 3)\nif [ "$got" = 5 ]; then echo PASS; else echo "FAIL: add 2 3 = $got, want 5"; exit 1; fi\n' > test.sh &&
git add . && git -c user.name=demo -c user.email=demo@example.com commit -qm calc && cd .. && echo "calc/ is ready: sh calc/test.sh fails"
