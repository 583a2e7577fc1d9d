-- Neovim end to end: start `torchdev-lint server` for a file, wait for its diagnostics, ask for
-- the code actions of one, apply its quick fix, and write what happened to $TDL_OUT as JSON.
-- Works with vim.lsp.start (Neovim 0.8+) and with start_client + buf_attach_client (0.7).
local out = os.getenv("TDL_OUT")
local wanted = os.getenv("TDL_CODE")
local timeout = 60000

local function finish(result)
  local handle = io.open(out, "w")
  handle:write(vim.fn.json_encode(result))
  handle:close()
  vim.cmd("qa!")
end

-- The diagnostic as the server sent it (Neovim 0.7 keeps only some fields in user_data.lsp).
local function lsp_of(diagnostic)
  local sent = diagnostic.user_data and diagnostic.user_data.lsp or {}
  return {
    range = {
      start = { line = diagnostic.lnum, character = diagnostic.col },
      ["end"] = { line = diagnostic.end_lnum, character = diagnostic.end_col },
    },
    severity = diagnostic.severity,
    message = diagnostic.message,
    source = diagnostic.source,
    code = sent.code or diagnostic.code,
  }
end

local function run()
  vim.cmd("edit " .. vim.fn.fnameescape(os.getenv("TDL_FILE")))
  local bufnr = vim.api.nvim_get_current_buf()
  local config = {
    name = "torchdev-lint",
    cmd = vim.fn.json_decode(os.getenv("TDL_SERVER")),
    cmd_env = { TDL_NVIM_MARKER = os.getenv("TDL_NVIM_MARKER") },
    root_dir = vim.fn.getcwd(),
  }
  local client_id
  if vim.lsp.start then
    client_id = vim.lsp.start(config)
  else
    client_id = vim.lsp.start_client(config)
    vim.lsp.buf_attach_client(bufnr, client_id)
  end
  if not vim.wait(timeout, function() return #vim.diagnostic.get(bufnr) > 0 end, 50) then
    return { error = "no diagnostics" }
  end
  local result = { codes = {}, sources = {} }
  local target
  for _, diagnostic in ipairs(vim.diagnostic.get(bufnr)) do
    local original = lsp_of(diagnostic)
    table.insert(result.codes, original.code)
    table.insert(result.sources, original.source)
    if original.code == wanted then
      target = original
    end
  end
  if target == nil then
    return result
  end
  local params = {
    textDocument = { uri = vim.uri_from_bufnr(bufnr) },
    range = target.range,
    context = { diagnostics = { target } },
  }
  local responses = vim.lsp.buf_request_sync(bufnr, "textDocument/codeAction", params, timeout) or {}
  result.titles = {}
  local chosen
  for _, response in pairs(responses) do
    for _, action in ipairs(response.result or {}) do
      table.insert(result.titles, action.title)
      if chosen == nil and action.kind == "quickfix" and vim.startswith(action.title, wanted .. ":") then
        chosen = action
      end
    end
  end
  if chosen ~= nil then
    local client = vim.lsp.get_client_by_id(client_id)
    vim.lsp.util.apply_workspace_edit(chosen.edit, client.offset_encoding)
  end
  result.lines = vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)
  return result
end

local ok, result = pcall(run)
if not ok then
  result = { error = tostring(result) }
end
finish(result)
