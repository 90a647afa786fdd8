// The web page: fills the language pickers from /languages and translates through /translate, with the API key
// typed in (kept in the browser's localStorage, as LibreTranslate's page keeps it).
"use strict";

const form = document.getElementById("translate-form");
const source = document.getElementById("source");
const target = document.getElementById("target");
const text = document.getElementById("text");
const result = document.getElementById("result");
const error = document.getElementById("error");
const alternativesTitle = document.getElementById("alternatives-title");
const alternativesList = document.getElementById("alternatives-list");
const apiKey = document.getElementById("api-key");
let languages = [];

function option(code, name) {
  const element = document.createElement("option");
  element.value = code;
  element.textContent = name;
  return element;
}

function fillTargets() {
  const chosen = source.value;
  const targets = chosen === "auto"
    ? [...new Set(languages.flatMap((language) => language.targets))]
    : (languages.find((language) => language.code === chosen) || { targets: [] }).targets;
  const previous = target.value;
  target.replaceChildren(...targets.map((code) => {
    const language = languages.find((each) => each.code === code);
    return option(code, language ? language.name : code);
  }));
  if (targets.includes(previous)) target.value = previous;
}

async function loadLanguages() {
  const response = await fetch("/languages");
  languages = await response.json();
  const sources = languages.filter((language) => language.targets.length > 0);
  source.replaceChildren(option("auto", "Detect language"), ...sources.map((l) => option(l.code, l.name)));
  if (sources.length > 0) source.value = sources[0].code;
  fillTargets();
}

async function translate(event) {
  event.preventDefault();
  error.textContent = "";
  result.textContent = "Translating…";
  alternativesList.replaceChildren();
  alternativesTitle.hidden = true;
  const body = {
    q: text.value,
    source: source.value,
    target: target.value,
    format: "text",
    alternatives: Number(document.getElementById("alternatives").value) || 0,
  };
  if (apiKey.value) body.api_key = apiKey.value;
  try {
    const response = await fetch("/translate", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    const answer = await response.json();
    if (!response.ok) {
      result.textContent = "";
      error.textContent = answer.error || `Error ${response.status}`;
      return;
    }
    result.textContent = answer.translatedText;
    const alternatives = answer.alternatives || [];
    alternativesTitle.hidden = alternatives.length === 0;
    alternativesList.replaceChildren(...alternatives.map((alternative) => {
      const item = document.createElement("li");
      item.textContent = alternative;
      return item;
    }));
  } catch (failure) {
    result.textContent = "";
    error.textContent = `The server could not be reached: ${failure}`;
  }
}

source.addEventListener("change", fillTargets);
apiKey.value = localStorage.getItem("api_key") || "";
apiKey.addEventListener("change", () => localStorage.setItem("api_key", apiKey.value));
form.addEventListener("submit", translate);
text.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) form.requestSubmit();
});
loadLanguages().catch((failure) => { error.textContent = `Languages could not be loaded: ${failure}`; });
