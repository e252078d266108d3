// lakeward web UI: the action buttons post to the daemon's JSON API with the API token, sent as
// "Authorization: Bearer"; the token is kept in this browser's local storage only. The answer of
// the API (status and body) is shown as it came.
"use strict";

const TOKEN_KEY = "lakeward.api_token";

function storedToken() {
  return window.localStorage.getItem(TOKEN_KEY) || "";
}

function keepToken(value) {
  if (value) {
    window.localStorage.setItem(TOKEN_KEY, value);
  } else {
    window.localStorage.removeItem(TOKEN_KEY);
  }
  document.getElementById("token").placeholder = value ? "kept" : "not set";
}

// The token to send: the one kept, else asked for (and kept).
function askToken() {
  let token = storedToken();
  if (!token) {
    token = (window.prompt("API token (one of the daemon's http.api_tokens):") || "").trim();
    keepToken(token);
  }
  return token;
}

function showAnswer(method, url, status, text) {
  const answer = document.getElementById("answer");
  let body = text;
  try {
    body = JSON.stringify(JSON.parse(text), null, 2);
  } catch (e) {
    // not JSON: shown as it came
  }
  const ok = status >= 200 && status < 300;
  answer.className = ok ? "ok" : "failed";
  document.getElementById("answer-status").textContent = `${method} ${url}: ${status || "no answer"}`;
  document.getElementById("answer-body").textContent = body;
  answer.hidden = false;
  answer.scrollIntoView({ block: "nearest" });
}

// The JSON body of an action form: its named fields that have a value ("true"/"false" as booleans).
// The form's fields as the API's JSON body: a ticked box is true (an unticked one is left out),
// every other field its text as typed ("true" in a pause reason stays text), empty ones left out.
function formBody(form) {
  const body = {};
  for (const field of form.elements) {
    if (!field.name || field.disabled || field.type === "submit" || field.type === "button") continue;
    if (field.type === "checkbox") {
      if (field.checked) body[field.name] = true;
    } else if (field.value !== "") {
      body[field.name] = field.value;
    }
  }
  return body;
}

async function submitAction(event) {
  event.preventDefault();
  const form = event.currentTarget;
  const url = form.dataset.api;
  const token = askToken();
  if (!token) {
    showAnswer("POST", url, 0, "no API token given: nothing was sent");
    return;
  }
  for (const button of form.querySelectorAll("button")) button.disabled = true;
  try {
    const response = await fetch(url, {
      method: "POST",
      headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
      body: JSON.stringify(formBody(form)),
    });
    showAnswer("POST", url, response.status, await response.text());
  } catch (error) {
    showAnswer("POST", url, 0, String(error));
  } finally {
    for (const button of form.querySelectorAll("button")) button.disabled = false;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const input = document.getElementById("token");
  keepToken(storedToken());
  document.getElementById("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    keepToken(input.value.trim());
    input.value = "";
  });
  document.getElementById("token-forget").addEventListener("click", () => {
    keepToken("");
    input.value = "";
  });
  document.getElementById("answer-close").addEventListener("click", () => {
    document.getElementById("answer").hidden = true;
  });
  for (const form of document.querySelectorAll("form[data-api]")) {
    form.addEventListener("submit", submitAction);
  }
  document.body.dataset.ready = "true";
});
