// The change feed page: each change the server hands out (markup it escaped) is put in its
// place by time, newest last: on DynamoDB the changes of different sessions come in no
// promised order (each shard's in turn), so arriving last is not being newest.
(function () {
  "use strict";
  const table = document.querySelector("#changes tbody");
  if (!table) {
    return;
  }
  const status = document.getElementById("feed");
  let count = 0;
  const source = new EventSource("/changes/events");
  source.addEventListener("change", function (event) {
    const holder = document.createElement("template");
    holder.innerHTML = JSON.parse(event.data).row.trim();
    const row = holder.content.firstElementChild;
    let before = table.lastElementChild; // most changes are the newest: look from the end
    while (before && before.dataset.at > row.dataset.at) {
      before = before.previousElementSibling;
    }
    table.insertBefore(row, before ? before.nextElementSibling : table.firstElementChild);
    count += 1;
    status.textContent = count + " change(s) so far; live";
  });
})();
