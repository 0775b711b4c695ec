# Tokenizer parity tests driven by the Python oracles (HF tokenizers, tiktoken, jinja2) from the
# test venv (.venv, made by scripts/setup.sh). Label: tokenizer. Skipped (exit 77) when the venv
# or ../shared/data is missing.
set(QS_TOK_PY ${CMAKE_SOURCE_DIR}/.venv/bin/python)
set(QS_TOK_DATA ${CMAKE_SOURCE_DIR}/tests/data/tokenizer)
# shared/ sits beside the clone in CI; QS_SHARED_DIR (environment, at configure time) overrides.
if(DEFINED ENV{QS_SHARED_DIR})
  set(QS_TOK_QWEN3 $ENV{QS_SHARED_DIR}/data/tokenizers/qwen3)
else()
  set(QS_TOK_QWEN3 ${CMAKE_SOURCE_DIR}/../shared/data/tokenizers/qwen3)
endif()
set(QS_TOK_QWEN36 ${CMAKE_BINARY_DIR}/tokenizer_data/qwen36/tokenizer.json)
set(QS_TOK_RUN ${CMAKE_SOURCE_DIR}/tests/tokenizer/run_python_test.sh)

function(qs_tokenizer_py_test name)
  add_test(NAME ${name} COMMAND bash ${QS_TOK_RUN} ${QS_TOK_PY} ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS tokenizer SKIP_RETURN_CODE 77 TIMEOUT 300)
endfunction()

qs_tokenizer_py_test(tokenizer_parity_qwen3
  ${CMAKE_SOURCE_DIR}/tools/tokenizer_parity.py --binary $<TARGET_FILE:qwenserve>
  --tokenizer ${QS_TOK_QWEN3}/tokenizer.json --corpus ${QS_TOK_DATA}/corpus.jsonl
  --invalid ${QS_TOK_DATA}/invalid_utf8.txt)

qs_tokenizer_py_test(tokenizer_qwen36_json
  ${CMAKE_SOURCE_DIR}/tools/qwen36_tokenizer_json.py ${QS_TOK_QWEN36})
set_tests_properties(tokenizer_qwen36_json PROPERTIES FIXTURES_SETUP qwen36_tokenizer)

qs_tokenizer_py_test(tokenizer_parity_qwen36
  ${CMAKE_SOURCE_DIR}/tools/tokenizer_parity.py --binary $<TARGET_FILE:qwenserve>
  --tokenizer ${QS_TOK_QWEN36} --corpus ${QS_TOK_DATA}/corpus.jsonl
  --invalid ${QS_TOK_DATA}/invalid_utf8.txt --tiktoken qwen3.6-35b-a3b)
set_tests_properties(tokenizer_parity_qwen36 PROPERTIES FIXTURES_REQUIRED qwen36_tokenizer)

qs_tokenizer_py_test(chat_template_parity_qwen3
  ${CMAKE_SOURCE_DIR}/tools/chat_template_parity.py --binary $<TARGET_FILE:qwenserve>
  --template-file ${QS_TOK_QWEN3}/tokenizer_config.json --format qwen3 --tokenizer ${QS_TOK_QWEN3})

qs_tokenizer_py_test(chat_template_parity_qwen36
  ${CMAKE_SOURCE_DIR}/tools/chat_template_parity.py --binary $<TARGET_FILE:qwenserve>
  --template-file ${QS_TOK_DATA}/qwen36_chat_template.jinja --format qwen3.6 --tokenizer ${QS_TOK_QWEN36})
set_tests_properties(chat_template_parity_qwen36 PROPERTIES FIXTURES_REQUIRED qwen36_tokenizer)

# The Jinja interpreter (src/jinja) against jinja2 on public chat templates of other families
# (tests/data/jinja/README.md), plus the Qwen3.6 template forced through the interpreter.
set(QS_JINJA_DATA ${CMAKE_SOURCE_DIR}/tests/data/jinja)
qs_tokenizer_py_test(jinja_template_parity
  ${CMAKE_SOURCE_DIR}/tools/jinja_template_parity.py --binary $<TARGET_FILE:qwenserve>
  --tokenizer ${CMAKE_SOURCE_DIR}/models/qwen36-tiny
  ${QS_JINJA_DATA}/llama3.1_instruct.jinja:tools
  ${QS_JINJA_DATA}/mistral7b_instruct_v0.3.jinja:tools_id9
  ${QS_JINJA_DATA}/gemma2_it.jinja:no_system
  ${QS_JINJA_DATA}/gemma3_it.jinja:parts
  ${QS_JINJA_DATA}/phi3.5_mini_instruct.jinja
  ${QS_JINJA_DATA}/deepseek_r1_distill_qwen.jinja:tools
  ${QS_JINJA_DATA}/qwen2.5_instruct.jinja:tools
  ${QS_TOK_DATA}/qwen36_chat_template.jinja:tools)
